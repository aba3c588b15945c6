/*
 * fake_program.h: a hand-written stand-in for a generated trainer program, used to test the
 * trainer (train.c) without the compiler. See fake_program.c.
 */
#ifndef FAKE_PROGRAM_H
#define FAKE_PROGRAM_H

#include "runtime/axrt.h"

#define FAKE_V 32 /* vocabulary */
#define FAKE_B 4  /* batch */
#define FAKE_T 16 /* sequence */

/* Defined as the generated code would define it, so the same file also builds a trainer. */
extern const RtProgram axlc_program;

/* Test hook: the step numbered fake_nan_at (1-based) reports a NaN loss; 0 means never. */
extern int fake_nan_at;
/* Test hook: the step numbered fake_spike_at reports 50 times its loss (an outlier); 0: never. */
extern int fake_spike_at;

/* Test hook: called at the end of every step with its number and the weight (V, V), which it
 * may change; NULL means none. Tests use it to send signals, change limits or spoil weights
 * at a chosen step. */
extern void (*fake_after_step)(int64_t step, float *weight);

#endif /* FAKE_PROGRAM_H */
