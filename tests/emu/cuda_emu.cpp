/* cuda_emu.cpp: the scheduler behind cuda_emu.h.
 *
 * A launch runs its blocks one after another. The threads of a block are fibers on the
 * calling OS thread, switched by a few lines of assembly (x86-64: callee-saved registers
 * and the stack pointer, nothing else, so a switch costs nanoseconds; ucontext would make
 * a system call per switch). A thread runs until it finishes, reaches __syncthreads, or
 * reaches a warp shuffle or a tensor-core product. cp.async copies are held per thread
 * and land only when that thread's wait_group completes their group, so that a read of
 * shared memory before the wait sees what was there before. The warps run one at a
 * time, each as far as it can go: a warp whose live threads all wait at a shuffle, or
 * whose 32 threads all wait at a product (computed then, for the whole warp), is
 * released and goes on; when every warp has stopped, the block is released if all of
 * its live threads wait at the same barrier, and the warps go on in the opposite order
 * (run_block). When nothing can be released, the barrier can never complete (divergent
 * code): the launch fails with a report of where each thread waits.
 *
 * Stacks come from a pool and go back as soon as their thread finishes. The scheduler
 * is left out of what it would decide anyway: a thread that finishes hands its stack to
 * the next thread of its warp when that one has not started (fiber_main), so that a
 * kernel without barriers runs a warp's threads as plain calls, one switch per warp; a
 * thread that stops switches straight to the next ready thread of its warp (pass_on).
 * Under AddressSanitizer every switch is announced (__sanitizer_start/finish_switch_fiber)
 * so that ASan knows which stack is live.
 */
#include "cuda_emu.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define CGC_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CGC_EMU_ASAN 1
#endif
#endif

#ifdef CGC_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

/* CGC_EMU_TSAN: the kernels are built with ThreadSanitizer (emu_compile_so, in a test
 * built with it), this file without it (the scheduler's own bookkeeping is not what is
 * checked), and TSan is told of the fibers and of what orders them (below). */
#ifdef CGC_EMU_TSAN
#include <sanitizer/tsan_interface.h>
/* the runtime's entry points for a range read or written (what its memcpy reports); the
 * size is a long, as GCC declares them where a sanitizer is on */
extern "C" void __tsan_read_range(void *addr, long size);
extern "C" void __tsan_write_range(void *addr, long size);
#endif

#if !defined(__x86_64__)
#error "cuda_emu.cpp switches fibers with x86-64 assembly; port cgc_emu_switch to this target"
#endif

extern "C" {
cgc_emu_uint3 cgc_emu_thread_idx, cgc_emu_block_idx, cgc_emu_block_dim, cgc_emu_grid_dim;

/* Saves the callee-saved registers on the current stack, stores the stack pointer in
 * *SAVE_SP, and resumes the stack at TO_SP (made by an earlier switch, or by
 * fiber_prepare). */
void cgc_emu_switch(void **save_sp, void *to_sp);
}

asm(".text\n"
    ".globl cgc_emu_switch\n"
    ".hidden cgc_emu_switch\n"
    ".type cgc_emu_switch,@function\n"
    "cgc_emu_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size cgc_emu_switch, .-cgc_emu_switch\n");

namespace {

/* MAX_COPIES: cp.async copies a thread may have in flight here (a GEMM stage is a few per
 * thread, three stages at most); the GPU has no such limit, so more is an error that
 * says to raise it. Held in a static array, not on the heap: under the racecheck, memory
 * a thread allocates and the scheduler frees would be a race. */
enum { MAX_BLOCK = 1024, WARP = 32, STACK_BYTES = 256 * 1024, MAX_COPIES = 128 };

enum FiberState {
    F_READY,        /* may run: not started yet, or released */
    F_BARRIER,      /* waiting at __syncthreads */
    F_SHUFFLE,      /* waiting at a warp shuffle */
    F_MMA,          /* waiting at a tensor-core product (cgc_emu_mma_16816) */
    F_DONE,
    F_FAULT,        /* stopped at a fault (cgc_emu_fault): the launch fails */
};

struct Stack {
    char *base;     /* usable bytes [base, base + STACK_BYTES); a guard page below */
    bool dirty;     /* abandoned mid-kernel: ASan's shadow may still mark frames */
};

/* A cp.async copy in flight (cgc_emu_cp_async16): its 16 bytes read when issued, written
 * when a wait completes its group. */
struct PendingCopy {
    void *dst;
    unsigned char bytes[16];
    unsigned group;
};

struct Fiber {
    FiberState state;
    bool started;
    void *sp;
    Stack *stack;
    void *asan_fake_stack;
    void *tsan_fiber;                   /* CGC_EMU_TSAN: the thread as TSan knows it */
    const char *bar_file;
    int bar_line;
    int shfl_kind, shfl_arg, shfl_width;
    unsigned shfl_mask;
    const char *shfl_file;              /* the shuffle's call site */
    int shfl_line;
    uint64_t shfl_in, shfl_out;
    float *mma_d;                       /* F_MMA: the thread's fragments, on its stack */
    const uint32_t *mma_a, *mma_b;
    bool mma_bf16;
    unsigned open_group;                /* the group cp.async adds to; those below are committed */
    unsigned ncopies;                   /* cp.async copies not yet completed: copies[this] */
};

/* One launch at a time: the indices above are process globals. */
pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;

/* Made by new and freed by stack_pool_release, not a static object: a kernel module that
 * defines a template's shared array (a static of an inline function, a GNU unique symbol)
 * cannot be unloaded, so its destructor functions run at exit, after the static objects'
 * destructors, and a static pool would be gone by then. */
std::vector<Stack *> &stack_pool = *new std::vector<Stack *>;
Fiber fibers[MAX_BLOCK];                /* cleared for each block (run_block) */
PendingCopy copies[MAX_BLOCK][MAX_COPIES];  /* each thread's cp.async copies in flight */
unsigned nthreads;
int current = -1;                       /* the running fiber, -1 in the scheduler */
unsigned warp_end;                      /* the end of the warp run_block is running */
void *sched_sp;
void *dead_sp;                          /* where a finished fiber's last switch saves to */
void (*launch_thunk)(void **);
void **launch_args;
char fault_what[1024];                  /* a fault of this block: what, and which thread */
int fault_thread = -1;

/* ---- AddressSanitizer's view of the stack switches ---- */

#ifdef CGC_EMU_ASAN
void *sched_fake_stack;
const void *sched_stack_bottom;
size_t sched_stack_size;
#define ASAN_START(save, bottom, size) __sanitizer_start_switch_fiber((save), (bottom), (size))
#define ASAN_FINISH(fake, bottom, size) __sanitizer_finish_switch_fiber((fake), (bottom), (size))
#else
#define ASAN_START(save, bottom, size) ((void)0)
#define ASAN_FINISH(fake, bottom, size) ((void)0)
#endif

/* ---- ThreadSanitizer's view: the racecheck ----
 *
 * Each thread of a block is a TSan fiber, and the switches between them order nothing
 * (no_sync), so TSan sees a block's threads as concurrent, as they are on a GPU, and
 * reports two accesses to one address, one of them a write, that nothing orders: a
 * missing __syncthreads, or a cp.async stage read before its wait. What orders them is
 * what CUDA orders them by: a __syncthreads (each thread releases the barrier when it
 * arrives and acquires it when it leaves; a thread that has exited counts as arrived),
 * and the launch (the host's work before it, the launch before what the host does
 * after). Blocks run one after another here and are ordered so (each block's threads
 * acquire what the previous block's released): a race between two blocks of a launch
 * is left to the shuffled schedule, as compute-sanitizer's racecheck leaves it. Atomics
 * are atomic operations to TSan (cuda_emu.h); a thread's stack is its own until its
 * block ends; a cp.async copy is the issuing thread's read of the source when issued and
 * its write of the destination when it lands. */
#ifdef CGC_EMU_TSAN
char barrier_sync, order_sync[2];
void *sched_tsan;
unsigned blocks_run;                    /* in this launch: order_sync by parity */

void tsan_launch_begin()
{
    sched_tsan = __tsan_get_current_fiber();
    blocks_run = 0;
    __tsan_release(&order_sync[0]);     /* the host's work before the launch */
    __tsan_release(&order_sync[1]);
}
void tsan_launch_end()
{
    __tsan_acquire(&order_sync[0]);
    __tsan_acquire(&order_sync[1]);
}
/* Thread I of every block is TSan fiber I, made once: a fiber costs system calls to make,
 * and blocks are ordered anyway. */
void *tsan_fibers[MAX_BLOCK];
void tsan_enter(Fiber *f)
{
    unsigned i = (unsigned)(f - fibers);
    if (!tsan_fibers[i]) tsan_fibers[i] = __tsan_create_fiber(0);
    f->tsan_fiber = tsan_fibers[i];
    __tsan_switch_to_fiber(f->tsan_fiber, __tsan_switch_to_fiber_no_sync);
}
void tsan_leave() { __tsan_switch_to_fiber(sched_tsan, __tsan_switch_to_fiber_no_sync); }
void tsan_thread_start() { __tsan_acquire(&order_sync[(blocks_run + 1) % 2]); }
void tsan_block_end() { blocks_run++; }
void tsan_thread_exit()
{
    __tsan_release(&order_sync[blocks_run % 2]);
    __tsan_release(&barrier_sync);
}
/* A thread stopped mid-kernel (a fault, a deadlock) is ended as if it had exited, so
 * that what it did is ordered before what follows the failed launch. */
void tsan_thread_end(Fiber *f, bool finished)
{
    if (!f->tsan_fiber) return;
    if (!finished) {   /* and made anew: its frames were never left */
        __tsan_switch_to_fiber(f->tsan_fiber, __tsan_switch_to_fiber_no_sync);
        tsan_thread_exit();
        tsan_leave();
        __tsan_destroy_fiber(f->tsan_fiber);
        tsan_fibers[f - fibers] = NULL;
    }
    f->tsan_fiber = NULL;
}
void tsan_barrier_arrive() { __tsan_release(&barrier_sync); }
void tsan_barrier_leave() { __tsan_acquire(&barrier_sync); }
void tsan_read(const void *p, size_t n) { __tsan_read_range((void *)p, (long)n); }
void tsan_release(void *p) { __tsan_release(p); }
void tsan_acquire(void *p) { __tsan_acquire(p); }
void tsan_write(void *p, size_t n) { __tsan_write_range(p, (long)n); }
#else
void tsan_launch_begin() {}
void tsan_launch_end() {}
void tsan_enter(Fiber *) {}
void tsan_leave() {}
void tsan_thread_start() {}
void tsan_block_end() {}
void tsan_thread_exit() {}
void tsan_thread_end(Fiber *, bool) {}
void tsan_barrier_arrive() {}
void tsan_barrier_leave() {}
void tsan_read(const void *, size_t) {}
void tsan_release(void *) {}
void tsan_acquire(void *) {}
void tsan_write(void *, size_t) {}
#endif

/* ---- stacks ---- */

Stack *stack_get()
{
    if (!stack_pool.empty()) {
        Stack *s = stack_pool.back();
        stack_pool.pop_back();
#ifdef CGC_EMU_ASAN
        if (s->dirty) ASAN_UNPOISON_MEMORY_REGION(s->base, STACK_BYTES);
#endif
        s->dirty = false;
        return s;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *m = mmap(NULL, STACK_BYTES + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "cgc: error: CUDA emulation: cannot map a %d KiB thread stack; "
                        "free memory or use smaller blocks\n", STACK_BYTES / 1024);
        abort();
    }
    mprotect(m, page, PROT_NONE);   /* overflow faults instead of corrupting */
    Stack *s = new Stack{(char *)m + page, false};
    return s;
}

void stack_put(Stack *s) { stack_pool.push_back(s); }

/* When the kernels' shared object is unloaded: stacks go back to the system (a stack
 * still held by a thread here would mean a launch is running, which cannot be). */
__attribute__((destructor)) void stack_pool_release()
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (Stack *s : stack_pool) {
#ifdef CGC_EMU_ASAN
        ASAN_UNPOISON_MEMORY_REGION(s->base, STACK_BYTES);
#endif
        munmap(s->base - page, STACK_BYTES + page);
        delete s;
    }
    delete &stack_pool;
}

/* ---- fibers ---- */

void fiber_main();

/* A stack on which cgc_emu_switch "returns" into fiber_main with the alignment of a
 * function entry (rsp = 8 mod 16). */
void fiber_prepare(Fiber *f)
{
    f->stack = stack_get();
    uintptr_t top = ((uintptr_t)f->stack->base + STACK_BYTES) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = NULL;                        /* fiber_main's return address: it never returns */
    *--sp = (void *)fiber_main;
    for (int r = 0; r < 6; r++) *--sp = NULL;   /* rbp rbx r12-r15 */
    f->sp = sp;
    f->started = true;
}

/* The scheduler's side of a switch: runs fiber I until it stops. */
void fiber_resume(unsigned i)
{
    Fiber *f = &fibers[i];
    if (!f->started) fiber_prepare(f);
    current = (int)i;
    cgc_emu_thread_idx.x = i;
    ASAN_START(&sched_fake_stack, f->stack->base, STACK_BYTES);
    tsan_enter(f);
    cgc_emu_switch(&sched_sp, f->sp);
    ASAN_FINISH(sched_fake_stack, NULL, NULL);
    f = &fibers[current];                /* the thread that stopped: I or one after it */
    current = -1;
#ifndef CGC_EMU_TSAN   /* under TSan a stack is not passed on within a block (end_block) */
    if (f->state == F_DONE) {
        stack_put(f->stack);
        f->stack = NULL;
    }
#endif
}

/* A stopping thread goes straight on to the thread run_block would resume after it: the
 * first ready thread after it in its warp (next_ready). pass_on switches to that thread when
 * it has started (its stack holds a switch to return to); hand_on gives a finished thread's
 * stack to it when it has not. Either returns NULL when the scheduler must go on. Under TSan
 * every switch goes through the scheduler (tsan_leave) and every thread is a fiber of its
 * own (tsan_enter). */
#ifdef CGC_EMU_TSAN
Fiber *pass_on() { return NULL; }
Fiber *hand_on(Fiber *) { return NULL; }
#else
Fiber *next_ready()
{
    for (unsigned i = (unsigned)current + 1; i < warp_end && fault_thread < 0; i++)
        if (fibers[i].state == F_READY) return &fibers[i];
    return NULL;
}

void make_current(Fiber *f)
{
    current = (int)(f - fibers);
    cgc_emu_thread_idx.x = (unsigned)current;
}

Fiber *pass_on()
{
    Fiber *n = next_ready();
    if (!n || !n->started) return NULL;
    make_current(n);
    return n;
}

Fiber *hand_on(Fiber *f)
{
    Fiber *n = next_ready();
    if (!n || n->started) return NULL;
    n->started = true;
    n->stack = f->stack;
    f->stack = NULL;
    make_current(n);
    return n;
}
#endif

/* The thread's side: on to the next ready thread of the warp, or back to the scheduler,
 * until released. */
void fiber_yield(Fiber *f)
{
    Fiber *n = pass_on();
    ASAN_START(&f->asan_fake_stack, n ? n->stack->base : sched_stack_bottom,
               n ? (size_t)STACK_BYTES : sched_stack_size);
    tsan_leave();
    cgc_emu_switch(&f->sp, n ? n->sp : sched_sp);
    ASAN_FINISH(f->asan_fake_stack, NULL, NULL);
}

/* Lands F's cp.async copies of every committed group but the NEWEST newest ones; with
 * ALL, every copy (the thread's exit: the GPU completes what is in flight). */
void land_copies(Fiber *f, unsigned newest, bool all)
{
    unsigned kept = 0;
    for (unsigned i = 0; i < f->ncopies; i++) {
        PendingCopy &c = copies[f - fibers][i];
        if (all || c.group + newest < f->open_group) {
            tsan_write(c.dst, sizeof c.bytes);
            __builtin_memcpy(c.dst, c.bytes, sizeof c.bytes);
        } else {
            copies[f - fibers][kept++] = c;
        }
    }
    f->ncopies = kept;
}

void fiber_main()
{
    ASAN_FINISH(NULL, &sched_stack_bottom, &sched_stack_size);
    Fiber *f = &fibers[current];
    do {
        tsan_thread_start();
        launch_thunk(launch_args);
        land_copies(f, 0, true);
        tsan_thread_exit();
        f->state = F_DONE;
    } while ((f = hand_on(f)));
    ASAN_START(NULL, sched_stack_bottom, sched_stack_size);   /* NULL: this fiber ends */
    tsan_leave();
    cgc_emu_switch(&dead_sp, sched_sp);
    abort();   /* never resumed */
}

Fiber *running_fiber(const char *what)
{
    if (current < 0) {
        fprintf(stderr, "cgc: error: CUDA emulation: %s called outside a kernel launch\n",
                what);
        abort();
    }
    return &fibers[current];
}

/* ---- faults ---- */

/* Records a fault of THREAD (the first one counts); run_block then fails the launch.
 * Returns false, for the checks that end with it. */
bool fault_at(unsigned thread, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool fault_at(unsigned thread, const char *fmt, ...)
{
    if (fault_thread >= 0) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fault_what, sizeof fault_what, fmt, ap);
    va_end(ap);
    fault_thread = (int)thread;
    tsan_release(fault_what);   /* a thread's message, read by the scheduler */
    return false;
}

/* ---- releasing waiting threads ---- */

/* Whether two call sites' __FILE__ name one file: one string in one translation unit, so
 * the pointers are compared first (every lane of a shuffle asks, once per round). */
bool same_file(const char *a, const char *b) { return a == b || strcmp(a, b) == 0; }

/* The lane whose value a waiting thread receives, or -1 for its own. */
int shuffle_source(const Fiber *f, unsigned lane)
{
    int width = f->shfl_width > 0 && f->shfl_width <= WARP ? f->shfl_width : WARP;
    unsigned segment = lane / (unsigned)width * (unsigned)width;
    unsigned src;
    if (f->shfl_kind == CGC_EMU_SHFL_XOR)
        src = lane ^ (unsigned)f->shfl_arg;
    else if (f->shfl_kind == CGC_EMU_SHFL_IDX)   /* CUDA: the lane srcLane % width of the segment */
        src = segment + (unsigned)f->shfl_arg % (unsigned)width;
    else
        src = lane + (unsigned)f->shfl_arg;
    if (src < segment || src >= segment + (unsigned)width || src >= WARP) return -1;
    return (int)src;
}

/* Whether the lanes of MASK (from FIRST, in a warp ending at END) all wait at the same
 * shuffle as lane I, with the same mask; else a fault, for what CUDA leaves undefined:
 * a mask without the caller, a named lane that has exited, is missing from a partial
 * warp or waits elsewhere, one call with two masks, a width that is no power of two. */
bool shuffle_agrees(unsigned first, unsigned end, unsigned i)
{
    const Fiber *f = &fibers[i];
    unsigned lane = i - first, mask = f->shfl_mask;
    int width = f->shfl_width;
    if (!(mask >> lane & 1u))
        return fault_at(i, "a warp shuffle (%s:%d) whose mask %#x leaves out the calling lane %u",
                        f->shfl_file, f->shfl_line, mask, lane);
    if (width < 1 || width > WARP || (width & (width - 1)) != 0)
        return fault_at(i, "a warp shuffle (%s:%d) of width %d, which is not a power of two "
                           "from 1 to 32", f->shfl_file, f->shfl_line, width);
    for (unsigned l = 0; l < WARP; l++) {
        if (!(mask >> l & 1u)) continue;
        const Fiber *o = &fibers[first + l];
        const char *wrong = NULL;
        if (first + l >= end) wrong = "is not in the block (a partial warp)";
        else if (o->state == F_DONE) wrong = "has exited";
        else if (o->state != F_SHUFFLE) wrong = "waits at a barrier or tensor-core product instead";
        else if (o->shfl_line != f->shfl_line || !same_file(o->shfl_file, f->shfl_file))
            wrong = "waits at another shuffle";
        else if (o->shfl_mask != mask || o->shfl_kind != f->shfl_kind || o->shfl_width != width)
            wrong = "calls it with another mask, kind or width";
        if (wrong)
            return fault_at(i, "lane %u calls a warp shuffle (%s:%d) with mask %#x, but lane %u "
                               "of the mask %s", lane, f->shfl_file, f->shfl_line, mask, l, wrong);
    }
    return true;
}

/* Completes the shuffle of lane I's mask (shuffle_agrees): each lane of it receives the
 * value of its source lane (its own when the source is past its segment, as CUDA
 * defines); a source lane outside the mask is a fault (CUDA: an undefined value). */
bool complete_shuffle(unsigned first, unsigned i)
{
    unsigned mask = fibers[i].shfl_mask;
    for (unsigned l = 0; l < WARP; l++) {
        if (!(mask >> l & 1u)) continue;
        Fiber *o = &fibers[first + l];
        int src = shuffle_source(o, l);
        if (src >= 0 && !(mask >> src & 1u))
            return fault_at(first + l, "a warp shuffle (%s:%d) reads lane %d, which its mask "
                                       "%#x leaves out (CUDA: an undefined value)",
                            o->shfl_file, o->shfl_line, src, mask);
        o->shfl_out = src >= 0 ? fibers[first + (unsigned)src].shfl_in : o->shfl_in;
    }
    for (unsigned l = 0; l < WARP; l++)
        if (mask >> l & 1u) fibers[first + l].state = F_READY;
    return true;
}

/* Warp W's shuffles, each complete when every lane its mask names waits at it. True when
 * one was released; false when none could be, or on a fault (fault_thread says which). */
bool release_warp(unsigned w)
{
    unsigned first = w * WARP, end = first + WARP < nthreads ? first + WARP : nthreads;
    bool released = false;
    for (unsigned i = first; i < end; i++) {
        if (fibers[i].state != F_SHUFFLE) continue;
        if (!shuffle_agrees(first, end, i) || !complete_shuffle(first, i)) return false;
        released = true;
    }
    return released;
}

/* The value of a 16-bit pattern: IEEE half, or bfloat16 (the top half of an f32). */
float half_value(uint32_t h, bool bf16)
{
    if (bf16) return __uint_as_float(h << 16);
    uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return __uint_as_float(sign | 0x7f800000u | m << 13);
    if (e == 0) return (sign ? -1.0f : 1.0f) * ldexpf((float)m, -24);   /* zero, subnormal */
    return __uint_as_float(sign | (e + 112) << 23 | m << 13);
}

/* The 16-bit value at position HALF (0: low) of fragment register R. */
float frag_value(uint32_t r, int half, bool bf16) { return half_value(half ? r >> 16 : r & 0xffff, bf16); }

/* Warp W's product, when its 32 threads all wait at one: A (16x16) and B (16x8) put
 * together from every lane's fragments (cgc_device.h's layout), then each lane's four
 * values of D += A @ B. True when it did. */
bool release_mma(unsigned w)
{
    unsigned first = w * WARP;
    if (first + WARP > nthreads) return false;
    for (unsigned i = first; i < first + WARP; i++)
        if (fibers[i].state != F_MMA || fibers[i].mma_bf16 != fibers[first].mma_bf16) return false;
    bool bf16 = fibers[first].mma_bf16;
    float A[16][16], B[16][8];
    for (unsigned lane = 0; lane < WARP; lane++) {
        const Fiber *f = &fibers[first + lane];
        int g = (int)lane / 4, t = (int)lane % 4;
        for (int h = 0; h < 2; h++) {
            A[g][2 * t + h] = frag_value(f->mma_a[0], h, bf16);
            A[g + 8][2 * t + h] = frag_value(f->mma_a[1], h, bf16);
            A[g][2 * t + 8 + h] = frag_value(f->mma_a[2], h, bf16);
            A[g + 8][2 * t + 8 + h] = frag_value(f->mma_a[3], h, bf16);
            B[2 * t + h][g] = frag_value(f->mma_b[0], h, bf16);
            B[2 * t + 8 + h][g] = frag_value(f->mma_b[1], h, bf16);
        }
    }
    for (unsigned lane = 0; lane < WARP; lane++) {
        Fiber *f = &fibers[first + lane];
        int g = (int)lane / 4, t = (int)lane % 4;
        for (int j = 0; j < 4; j++) {
            int row = g + (j >= 2 ? 8 : 0), col = 2 * t + (j & 1);
            float sum = f->mma_d[j];
            for (int k = 0; k < 16; k++) sum += A[row][k] * B[k][col];
            f->mma_d[j] = sum;
        }
        f->state = F_READY;
    }
    return true;
}

/* The block barrier completes when every live thread waits at the same __syncthreads. */
bool release_barrier()
{
    const Fiber *site = NULL;
    for (unsigned i = 0; i < nthreads; i++) {
        const Fiber *f = &fibers[i];
        if (f->state == F_DONE) continue;
        if (f->state != F_BARRIER) return false;
        if (!site) site = f;
        else if (f->bar_line != site->bar_line || !same_file(f->bar_file, site->bar_file))
            return false;
    }
    if (!site) return false;
    for (unsigned i = 0; i < nthreads; i++)
        if (fibers[i].state == F_BARRIER) fibers[i].state = F_READY;
    return true;
}

/* "at a.cu:12" or "at a warp shuffle" or "finished", for the deadlock report. */
void describe_wait(const Fiber *f, char *buf, size_t n)
{
    if (f->state == F_BARRIER) snprintf(buf, n, "wait at __syncthreads %s:%d", f->bar_file, f->bar_line);
    else if (f->state == F_SHUFFLE) snprintf(buf, n, "wait at a warp shuffle");
    else if (f->state == F_MMA) snprintf(buf, n, "wait at a tensor-core product (all 32 lanes must)");
    else snprintf(buf, n, "have finished");
}

/* Prints which threads wait where, in ranges of consecutive threads alike. */
void report_deadlock(const char *name, unsigned block, unsigned grid)
{
    fprintf(stderr,
            "cgc: error: CUDA emulation: kernel %s, block %u of %u: a barrier can never "
            "complete (a __syncthreads, warp shuffle or tensor-core product that not every thread reaches, "
            "e.g. inside a branch); the launch fails. Threads:\n",
            name ? name : "(unnamed)", block, grid);
    unsigned i = 0;
    while (i < nthreads) {
        char what[512], next[512];
        describe_wait(&fibers[i], what, sizeof what);
        unsigned j = i + 1;
        for (; j < nthreads; j++) {
            describe_wait(&fibers[j], next, sizeof next);
            if (strcmp(next, what) != 0) break;
        }
        fprintf(stderr, "  threads %u-%u %s\n", i, j - 1, what);
        i = j;
    }
}

/* Gives the stacks still held back to the pool (those of threads stopped mid-kernel,
 * after a fault or a deadlock, marked dirty), and ends the threads for TSan. */
void end_block()
{
    for (unsigned i = 0; i < nthreads; i++) {
        Fiber *f = &fibers[i];
        tsan_thread_end(f, f->state == F_DONE);
        if (!f->stack) continue;
        f->stack->dirty = f->state != F_DONE;
        stack_put(f->stack);
        f->stack = NULL;
    }
    tsan_block_end();
}

/* Fails the launch with the block's fault. Returns -1. */
int report_fault(const char *name, unsigned block, unsigned grid)
{
    tsan_acquire(fault_what);
    fprintf(stderr, "cgc: error: CUDA emulation: kernel %s, block %u of %u, thread %d: %s; the "
                    "launch fails\n", name ? name : "(unnamed)", block, grid, fault_thread,
            fault_what);
    fault_thread = -1;
    end_block();
    return -1;
}

/* The schedule (CGC_EMU_SCHEDULE, read at the first launch), each one CUDA allows, so
 * that a kernel's tests can run it under more than one:
 *   late      (the default) warps in ascending and descending order by turns (run_block);
 *             cp.async copies land at their thread's wait, the latest moment possible
 *   early     the same warp order; copies land when issued, the earliest moment: a stage
 *             overwritten before other warps are done with it shows, which `late` hides
 *   shuffled  copies land late; the warps run in a pseudo-random order, a new one after
 *             every barrier and in every block, and the blocks of a launch in one too
 *             (fixed, so a failure repeats): a block that reads what another block of
 *             the same launch writes, with nothing ordering them, shows */
enum Schedule { SCHEDULE_LATE, SCHEDULE_EARLY, SCHEDULE_SHUFFLED };
Schedule schedule = SCHEDULE_LATE;

void read_schedule()
{
    static bool read;
    if (read) return;
    read = true;
    const char *v = getenv("CGC_EMU_SCHEDULE");
    if (!v || !*v || strcmp(v, "late") == 0) return;
    if (strcmp(v, "early") == 0) schedule = SCHEDULE_EARLY;
    else if (strcmp(v, "shuffled") == 0) schedule = SCHEDULE_SHUFFLED;
    else fprintf(stderr, "cgc: CUDA emulation: CGC_EMU_SCHEDULE=%s is not late, early or "
                         "shuffled; using late\n", v);
}

/* A permutation of 0..n-1, n a power of two: w -> (a w + c) mod n with a odd. Its
 * values below a count, in its order, are a permutation of 0..count-1. */
struct Permutation {
    unsigned a, c, n;
    unsigned at(unsigned w) const { return (a * w + c) & (n - 1); }
};

Permutation permutation(unsigned count, uint64_t h)
{
    unsigned n = 1;
    while (n < count) n <<= 1;
    h ^= h >> 31;
    unsigned a = (unsigned)(h | 1) & (n - 1);
    return Permutation{a ? a : 1, (unsigned)(h >> 32) & (n - 1), n};
}

/* The K-th of NWARPS warps to run in barrier interval PHASE of block BLOCK: ascending
 * and descending by turns, or (shuffled) in an order hashed from PHASE and BLOCK. */
unsigned warp_at(unsigned k, unsigned nwarps, unsigned phase, unsigned block)
{
    if (schedule != SCHEDULE_SHUFFLED) return phase & 1 ? nwarps - 1 - k : k;
    Permutation p = permutation(nwarps, (uint64_t)phase * 0x9e3779b97f4a7c15ull ^
                                            (uint64_t)block * 0xbf58476d1ce4e5b9ull);
    for (unsigned w = 0, seen = 0;; w++)
        if (p.at(w) < nwarps && seen++ == k) return p.at(w);
}

/* Runs every thread of one block to completion; -1 on a deadlock. Between two block
 * barriers the warps run one after another, each as far as it can go (its shuffles and
 * tensor-core products released as its lanes reach them): in ascending order after an
 * even number of barriers, descending after an odd one. CUDA orders nothing between the
 * warps of a block but the barriers, so this is one of its schedules, and one in which a
 * warp is a whole barrier interval ahead of the others: a kernel that lacks a
 * __syncthreads between one warp's use of shared memory and another's overwriting it
 * computes wrong values here instead of passing by luck. */
int run_block(unsigned block, unsigned grid, const char *name)
{
    cgc_emu_block_idx.x = block;
    memset(fibers, 0, nthreads * sizeof *fibers);
    unsigned nwarps = (nthreads + WARP - 1) / WARP;
    for (unsigned phase = 0;; phase++) {
        bool any_live = false;
        for (unsigned k = 0; k < nwarps; k++) {
            unsigned w = warp_at(k, nwarps, phase, block);
            unsigned first = w * WARP, end = first + WARP < nthreads ? first + WARP : nthreads;
            warp_end = end;
            do {
                for (unsigned i = first; i < end && fault_thread < 0; i++)
                    if (fibers[i].state == F_READY) fiber_resume(i);
            } while (fault_thread < 0 && (release_warp(w) || release_mma(w)));
            if (fault_thread >= 0) return report_fault(name, block, grid);
            for (unsigned i = first; i < end; i++) any_live |= fibers[i].state != F_DONE;
        }
        if (!any_live) {
            end_block();
            return 0;
        }
        if (!release_barrier()) {
            report_deadlock(name, block, grid);
            end_block();
            return -1;
        }
    }
}

}  // namespace

extern "C" void cgc_emu_fault(const char *what)
{
    Fiber *f = running_fiber(what);
    fault_at((unsigned)current, "%s", what);
    f->state = F_FAULT;
    fiber_yield(f);
    abort();   /* never resumed: its block is abandoned */
}

extern "C" void cgc_emu_syncthreads(const char *file, int line)
{
    Fiber *f = running_fiber("__syncthreads");
    f->state = F_BARRIER;
    f->bar_file = file;
    f->bar_line = line;
    tsan_barrier_arrive();
    fiber_yield(f);
    tsan_barrier_leave();
}

extern "C" uint64_t cgc_emu_shuffle(int kind, unsigned mask, uint64_t bits, int arg, int width,
                                    const char *file, int line)
{
    Fiber *f = running_fiber("a warp shuffle");
    f->state = F_SHUFFLE;
    f->shfl_file = file;
    f->shfl_line = line;
    f->shfl_kind = kind;
    f->shfl_mask = mask;
    f->shfl_in = bits;
    f->shfl_arg = arg;
    f->shfl_width = width;
    fiber_yield(f);
    return f->shfl_out;
}

extern "C" void cgc_emu_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2], bool bf16)
{
    Fiber *f = running_fiber("a tensor-core product");
    f->state = F_MMA;
    f->mma_d = d;
    f->mma_a = a;
    f->mma_b = b;
    f->mma_bf16 = bf16;
    fiber_yield(f);
}

extern "C" void cgc_emu_cp_async16(void *dst, const void *src, bool valid)
{
    Fiber *f = running_fiber("cp.async");
    if ((uintptr_t)dst % 16 != 0 || (valid && (uintptr_t)src % 16 != 0))
        cgc_emu_fault(valid && (uintptr_t)src % 16 != 0
                          ? "cp.async of 16 bytes from a global address not 16-byte aligned"
                          : "cp.async of 16 bytes to a shared address not 16-byte aligned");
    PendingCopy c = {dst, {0}, f->open_group};
    if (valid) {
        tsan_read(src, sizeof c.bytes);
        __builtin_memcpy(c.bytes, src, sizeof c.bytes);
    }
    if (schedule == SCHEDULE_EARLY) {   /* landed */
        tsan_write(dst, sizeof c.bytes);
        __builtin_memcpy(dst, c.bytes, sizeof c.bytes);
    } else {
        if (f->ncopies == MAX_COPIES)
            cgc_emu_fault("more cp.async copies in flight than the emulation holds "
                          "(MAX_COPIES in tests/emu/cuda_emu.cpp; raise it)");
        copies[f - fibers][f->ncopies++] = c;
    }
}

extern "C" void cgc_emu_cp_async_commit(void) { running_fiber("cp.async.commit_group")->open_group++; }

extern "C" void cgc_emu_cp_async_wait(unsigned newest)
{
    land_copies(running_fiber("cp.async.wait_group"), newest, false);
}

extern "C" int cgc_emu_launch(unsigned grid, unsigned block, void (*thunk)(void **),
                              void **args, const char *name)
{
    if (grid == 0 || block == 0 || block > MAX_BLOCK) {
        fprintf(stderr, "cgc: error: CUDA emulation: kernel %s launched with grid %u and "
                        "block %u; a launch needs grid >= 1 and 1 <= block <= %d\n",
                name ? name : "(unnamed)", grid, block, (int)MAX_BLOCK);
        return -1;
    }
    pthread_mutex_lock(&launch_lock);
    read_schedule();
    tsan_launch_begin();
    nthreads = block;
    launch_thunk = thunk;
    launch_args = args;
    cgc_emu_grid_dim = cgc_emu_uint3{grid, 1, 1};
    cgc_emu_block_dim = cgc_emu_uint3{block, 1, 1};
    cgc_emu_thread_idx = cgc_emu_uint3{0, 0, 0};
    cgc_emu_block_idx = cgc_emu_uint3{0, 0, 0};
    /* the blocks in order, or (shuffled) in an order hashed from the launch's number:
     * CUDA orders the blocks of a launch in no way */
    static uint64_t launches;
    int rc = 0;
    if (schedule != SCHEDULE_SHUFFLED) {
        for (unsigned b = 0; b < grid && rc == 0; b++) rc = run_block(b, grid, name);
    } else {
        Permutation order = permutation(grid, ++launches * 0x94d049bb133111ebull);
        for (unsigned w = 0; w < order.n && rc == 0; w++)
            if (order.at(w) < grid) rc = run_block(order.at(w), grid, name);
    }
    tsan_launch_end();
    pthread_mutex_unlock(&launch_lock);
    return rc;
}
