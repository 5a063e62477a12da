# embed.cmake: cmake -DIN=codegen/cgc_device.h -DOUT=.../plan_device_prelude.c -DNAME=plan_device_prelude
#              [-DINLINE=cgc_math.h] -P embed.cmake
# Writes OUT, a C file defining `const char NAME[]` with IN's text, one string literal per
# line, so that code cgc writes out is a real file in the tree and a string in the library.
file(READ "${IN}" text)
# INLINE: headers beside IN (comma-separated) whose `#include "NAME"` line is replaced by
# their text, so that the string stands alone (NVRTC compiles it with no include path).
get_filename_component(dir "${IN}" DIRECTORY)
string(REPLACE "," ";" INLINE "${INLINE}")
foreach(name ${INLINE})
  file(READ "${dir}/${name}" body)
  string(REPLACE "#include \"${name}\"\n" "${body}" text "${text}")
endforeach()
string(REPLACE "\\" "\\\\" text "${text}")
string(REPLACE "\"" "\\\"" text "${text}")
string(REPLACE "\t" "\\t" text "${text}")
string(REGEX REPLACE "\n" "\\\\n\"\n    \"" text "${text}")
file(WRITE "${OUT}.tmp"
     "/* Generated from ${IN} by codegen/embed.cmake: edit that file, not this one. */\n"
     "const char ${NAME}[] =\n    \"${text}\";\n")
# Only touch OUT when the text changed, so that an unchanged header rebuilds nothing.
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
file(REMOVE "${OUT}.tmp")
