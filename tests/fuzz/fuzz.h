/*
 * fuzz.h: what the fuzz targets share. Each target defines LLVMFuzzerTestOneInput; it is
 * linked either with libFuzzer (-DAXLC_FUZZ=ON, clang) or with replay.c, whose main() runs
 * a kept corpus through it as a CTest test in every build. The helpers give the targets
 * scratch files (the APIs under test take paths) and an assertion that names the broken
 * invariant before aborting, which is how a target reports a finding to libFuzzer.
 */
#ifndef FUZZ_H
#define FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts with "file:line: check `expr` failed: <message>" unless cond holds. */
#define FUZZ_CHECK(cond, ...) ((cond) ? (void)0 : fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__))
void fuzz_fail(const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

/* A new file holding `data` (mkstemp under $TMPDIR or /tmp); the caller unlinks and frees
 * the returned path. */
char *fuzz_temp_file(const void *data, size_t size);
/* A new, empty directory (mkdtemp); the caller removes it with fuzz_remove_tree. */
char *fuzz_temp_dir(void);
/* Removes `path` and, if it is a directory, everything under it. */
void fuzz_remove_tree(const char *path);
/* Writes `data` to `path`, replacing it; aborts on failure. */
void fuzz_write_file(const char *path, const void *data, size_t size);

#endif /* FUZZ_H */
