/* csv.h: the fields of a CSV file (RFC 4180, as Python's csv module and pandas read it).
 *
 * Fields are separated by commas and records by newlines (LF or CRLF). A field may be
 * quoted: then it may hold commas, newlines and quotes (doubled: ""). Blank lines are
 * skipped, a UTF-8 byte order mark at the start is ignored, and the last record needs no
 * newline. Text after a closing quote and a quoted field left open are errors naming
 * the line. The file is mapped, not read, and each field handed over in turn: what the
 * fields mean is the caller's.
 */
#ifndef CGC_CSV_H
#define CGC_CSV_H

#include <stddef.h>
#include <stdint.h>

/* A field: record RECORD (0 the header), which begins on line LINE, column COL (0 the
 * first), its text unquoted (NUL-terminated, valid during the call). 0 to go on, -1 to
 * stop (the callback said why). */
typedef int (*CsvField)(void *ctx, int64_t record, int64_t line, int col, const char *text, size_t len);
/* After each record: its number of fields. 0 or -1 as CsvField. */
typedef int (*CsvRecord)(void *ctx, int64_t record, int64_t line, int fields);

/* Reads PATH, calling FIELD and RECORD. 0, or -1 after "cgc: error: PATH...: ..." (or
 * a callback's -1). */
int csv_read(const char *path, CsvField field, CsvRecord record, void *ctx);

#endif
