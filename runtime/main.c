/*
 * main.c: the entry point of a compiled trainer, in its own library (axrt_main) so that
 * libaxrt itself has no main and can be linked into tests and the JIT. The generated object
 * file defines axlc_program; everything else is rt_train_main.
 */
#include "axrt.h"

extern const RtProgram axlc_program;

int main(int argc, char **argv) {
    return rt_train_main(&axlc_program, argc, argv);
}
