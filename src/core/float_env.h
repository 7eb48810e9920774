#pragma once
// The floating-point environment parallax computes in.

namespace px {

// Flushes subnormal results to zero and reads subnormal inputs as zero
// (x86 MXCSR's FTZ and DAZ bits) on the calling thread. Threads created
// afterwards inherit it (POSIX: pthread_create copies the floating-point
// environment), so a program calls it once, first thing in main.
//
// Why: an SGD momentum buffer whose gradient went to zero (a dead ReLU unit)
// decays by 0.9 a step into the subnormal range, where each multiply costs
// ~100 cycles on this CPU: `train --model mlp --batch 7` spent 92% of its
// time in the optimizer and ran 10x slower after a thousand steps.
// PyTorch offers the same switch as torch.set_flush_denormal(True).
void flush_subnormals_to_zero();

}  // namespace px
