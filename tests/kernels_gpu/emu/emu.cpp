/* Fiber scheduler and host stand-ins for the CUDA runtime calls of the kernels and tests
 * (see cuda_runtime.h in this directory). Device memory is host memory; streams and
 * events are tokens; every call completes before it returns.
 *
 * On x86-64 a fiber switch is a few instructions (callee-saved registers, the stack
 * pointer, MXCSR and the x87 control word), not ucontext's swapcontext, whose signal-mask
 * system call per switch made a GPT-2-shape step spend most of its time in the kernel;
 * other machines use ucontext. */
#include "cuda_runtime.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <vector>

emu_thread_state *emu_cur;

namespace {

#if defined(__x86_64__)
/* Saves the callee-saved state on the current stack, stores the stack pointer in *save and
 * resumes the context whose stack pointer is `next` (System V ABI). */
extern "C" void emu_switch(void **save, void *next);
asm(R"(
    .text
    .p2align 4
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");
struct context {
  void *sp;
};
#else
struct context {
  ucontext_t uc;
};
#endif

struct fiber {
  context ctx;
  emu_thread_state st;
  bool done;
  std::vector<char> stack;
};

/* Barrier state of a block or a warp: threads still running, arrivals, generation. */
struct barrier {
  unsigned alive, arrived;
  unsigned long gen;
};

struct warp {
  barrier bar;
  uint64_t slot[32];
};

context scheduler;
std::vector<fiber> fibers;
std::vector<warp> warps;
barrier block_bar;
std::function<void()> *body;
fiber *running;

unsigned linear_tid(void) { return emu_cur->tid.x + emu_cur->tid.y * emu_cur->bdim.x; }

void fiber_main(void);

#if defined(__x86_64__)
void switch_to(context *from, context *to) { emu_switch(&from->sp, to->sp); }

/* Never returns: fiber_main switches back to the scheduler when the body ends. */
extern "C" void emu_fiber_entry(void) { fiber_main(); }

/* A fresh stack whose first switch "returns" into emu_fiber_entry with the current
 * floating-point control state and the alignment of a function entry. */
void start_context(fiber *f) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(f->stack.data()) + f->stack.size()) & ~uintptr_t{15};
  void **sp = reinterpret_cast<void **>(top);
  *--sp = nullptr;                                      /* emu_fiber_entry's return slot */
  *--sp = reinterpret_cast<void *>(&emu_fiber_entry);   /* emu_switch's ret */
  for (int i = 0; i < 6; i++)                           /* rbp rbx r12 r13 r14 r15 */
    *--sp = nullptr;
  uint32_t mxcsr = 0;
  uint16_t fpcw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  *--sp = nullptr;
  std::memcpy(sp, &mxcsr, 4);
  std::memcpy(reinterpret_cast<char *>(sp) + 4, &fpcw, 2);
  f->ctx.sp = sp;
}
#else
void switch_to(context *from, context *to) { swapcontext(&from->uc, &to->uc); }

void start_context(fiber *f) {
  getcontext(&f->ctx.uc);
  f->ctx.uc.uc_stack.ss_sp = f->stack.data();
  f->ctx.uc.uc_stack.ss_size = f->stack.size();
  f->ctx.uc.uc_link = &scheduler.uc;
  makecontext(&f->ctx.uc, fiber_main, 0);
}
#endif

void yield(void) { switch_to(&running->ctx, &scheduler); }

/* Releases the waiters when every running thread has arrived. */
void release_if_complete(barrier *b) {
  if (b->alive && b->arrived == b->alive) {
    b->arrived = 0;
    b->gen++;
  }
}

void wait_at(barrier *b) {
  unsigned long gen = b->gen;
  b->arrived++;
  release_if_complete(b);
  while (b->gen == gen)
    yield();
}

void fiber_main(void) {
  (*body)();
  running->done = true;
  block_bar.alive--;
  release_if_complete(&block_bar);
  barrier *w = &warps[linear_tid() / 32].bar;
  w->alive--;
  release_if_complete(w);
  switch_to(&running->ctx, &scheduler); /* a finished fiber is never resumed */
}

}  // namespace

void emu_syncthreads(void) { wait_at(&block_bar); }

uint64_t emu_warp_exchange(uint64_t v, int src) {
  warp *w = &warps[linear_tid() / 32];
  w->slot[linear_tid() % 32] = v;
  wait_at(&w->bar);
  uint64_t r = w->slot[src];
  wait_at(&w->bar);
  return r;
}

uint32_t emu_ballot(bool pred) {
  warp *w = &warps[linear_tid() / 32];
  w->slot[linear_tid() % 32] = pred;
  wait_at(&w->bar);
  uint32_t mask = 0;
  for (unsigned i = 0; i < 32; i++)
    mask |= (uint32_t)(w->slot[i] & 1u) << i;
  wait_at(&w->bar);
  return mask;
}

void emu_launch(dim3 grid, dim3 block, std::function<void()> kernel_body) {
  unsigned n = block.x * block.y * block.z;
  if (fibers.size() < n)
    fibers.resize(n);
  warps.assign((n + 31) / 32, warp{});
  body = &kernel_body;
  for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
      for (unsigned bx = 0; bx < grid.x; bx++) {
        block_bar = barrier{n, 0, 0};
        for (unsigned w = 0; w < warps.size(); w++) {
          warps[w].bar = barrier{(w + 1) * 32 <= n ? 32 : n - w * 32, 0, 0};
          std::memset(warps[w].slot, 0, sizeof warps[w].slot);
        }
        for (unsigned t = 0; t < n; t++) {
          fiber &f = fibers[t];
          f.done = false;
          f.st.tid = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
          f.st.bid = uint3{bx, by, bz};
          f.st.bdim = block;
          f.st.gdim = grid;
          if (f.stack.empty())
            f.stack.resize(128 * 1024);
          start_context(&f);
        }
        for (unsigned left = n; left > 0;) {
          left = 0;
          for (unsigned t = 0; t < n; t++) {
            fiber &f = fibers[t];
            if (f.done)
              continue;
            running = &f;
            emu_cur = &f.st;
            switch_to(&scheduler, &f.ctx);
            left += !f.done;
          }
        }
      }
}

extern "C" {
cudaError_t cudaGetDeviceCount(int *count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int) {
  std::memset(prop, 0, sizeof *prop);
  std::strcpy(prop->name, "host emulation");
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
  *s = reinterpret_cast<cudaStream_t>(uintptr_t{1});
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t *e) {
  *e = reinterpret_cast<cudaEvent_t>(uintptr_t{1});
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0; /* no device time: the test prints 0 GB/s */
  return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n) {
  *p = std::malloc(n ? n : 1);
  if (!*p)
    return cudaErrorMemoryAllocation;
  std::memset(*p, 0xA5, n); /* garbage, as fresh device memory may hold */
  return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) {
  std::memmove(d, s, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memmove(d, s, n);
  return cudaSuccess;
}
cudaError_t cudaMemset(void *d, int v, size_t n) {
  std::memset(d, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) {
  std::memset(d, v, n);
  return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t) { return "emulated CUDA error"; }
}
