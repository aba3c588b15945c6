/*
 * fuzz_ckpt_index.c: fuzz target for checkpoint verification (runtime/ckpt.c).
 *
 * Once per process, rt_ckpt_save writes two valid checkpoints into a scratch directory:
 * step 10, left alone, and step 20, whose index.json each input replaces. The input is
 *   [ "/" NAME "\n" ] INDEX
 * INDEX becomes step 20's index.json, after every "@BYTES@" and "@CRC@" in it is replaced
 * by the size and CRC-32 of step 20's state.safetensors (so the corpus does not depend on
 * the exact bytes rt_st_write produces). With the optional prefix, the step directory is
 * renamed NAME ('/' and NUL become '_') for the run, which fuzzes the directory names.
 *
 * Never a crash or a leak, and:
 *   - rt_ckpt_open of step 20 succeeds only if the directory has its canonical name and the
 *     index is a JSON object with "step": 20 whose "files" list state.safetensors and give
 *     every listed file (a plain name in the step directory) its true size and CRC-32; it
 *     then yields step 20's state. A refusal has a message naming the checkpoint directory.
 *   - rt_ckpt_open_latest always opens a checkpoint (step 10 is intact): step 20 exactly
 *     when rt_ckpt_open(20) succeeds, else step 10, with a warning if step 20 was damaged.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "runtime/axrt.h"

#define OLD_STEP 10
#define STEP     20
#define STEP_DIR "step_00000020"

/* The scratch checkpoint directory, made on the first input and removed at exit (libFuzzer
 * hands a target no context, so this is the one piece of state a run keeps). */
static struct {
  char *root;          /* fuzz_temp_dir() */
  char dir[512];       /* root/ck, the checkpoint directory */
  char sdir[600];      /* dir/step_00000020 */
  char index[700];     /* sdir/index.json */
  int64_t state_bytes; /* of sdir/state.safetensors */
  uint32_t state_crc;
} fx;

static const float W[6] = {1, -2, 3.5f, 0, 1e-3f, 7};

/* ===== the fixture ==================================================================== */

static void save(int64_t step) {
  RtTensor t[] = {{"model/w", RT_DT_F32, 2, {2, 3}, W, 0},
                  {"opt/m/model/w", RT_DT_F32, 2, {2, 3}, W, 0}};
  RtCkptState s = {.step = step,
                   .data_position = 100 + step,
                   .rng_state = 7,
                   .config = "{}",
                   .tensors = t,
                   .n_tensors = 2};
  RtError err = {{0}};
  FUZZ_CHECK(rt_ckpt_save(fx.dir, &s, 0, &err) == 0, "harness: cannot save step %lld: %s",
             (long long)step, err.msg);
}

/* Size and CRC-32 of a file, read without the runtime; -1 if it cannot be read. */
static int64_t file_crc(const char *path, uint32_t *crc) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  unsigned char buf[4096];
  int64_t size = 0;
  *crc = 0;
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0; size += (int64_t)n)
    *crc = rt_crc32(*crc, buf, n);
  fclose(f);
  return size;
}

static void remove_fixture(void) {
  fuzz_remove_tree(fx.root);
  free(fx.root);
}

static void setup(void) {
  if (fx.root) return;
  fx.root = fuzz_temp_dir();
  snprintf(fx.dir, sizeof fx.dir, "%s/ck", fx.root);
  snprintf(fx.sdir, sizeof fx.sdir, "%s/" STEP_DIR, fx.dir);
  snprintf(fx.index, sizeof fx.index, "%s/index.json", fx.sdir);
  save(OLD_STEP);
  save(STEP);
  char state[700];
  snprintf(state, sizeof state, "%s/state.safetensors", fx.sdir);
  fx.state_bytes = file_crc(state, &fx.state_crc);
  FUZZ_CHECK(fx.state_bytes > 0, "harness: cannot read %s", state);
  atexit(remove_fixture);
}

/* ===== the input ====================================================================== */

/* INDEX with the placeholders replaced; malloc'd, *n receives its length. */
static char *expand(const uint8_t *data, size_t size, size_t *n) {
  char bytes[32], crc[32];
  snprintf(bytes, sizeof bytes, "%lld", (long long)fx.state_bytes);
  snprintf(crc, sizeof crc, "%lu", (unsigned long)fx.state_crc);
  char *out = malloc(size * 2 + 1), *o = out; /* a number is < 2x its placeholder */
  FUZZ_CHECK(out != NULL, "out of memory");
  for (size_t i = 0; i < size;) {
    if (size - i >= 7 && memcmp(data + i, "@BYTES@", 7) == 0) {
      o += sprintf(o, "%s", bytes);
      i += 7;
    } else if (size - i >= 5 && memcmp(data + i, "@CRC@", 5) == 0) {
      o += sprintf(o, "%s", crc);
      i += 5;
    } else {
      *o++ = (char)data[i++];
    }
  }
  *n = (size_t)(o - out);
  return out;
}

/* Splits off the optional "/NAME\n" prefix into name (empty if none); returns the rest. */
static const uint8_t *split_name(const uint8_t *data, size_t *size, char *name, size_t cap) {
  name[0] = '\0';
  const uint8_t *nl = *size && data[0] == '/' ? memchr(data, '\n', *size) : NULL;
  if (!nl) return data;
  size_t len = (size_t)(nl - data - 1);
  if (len >= cap) len = cap - 1;
  for (size_t i = 0; i < len; i++)
    name[i] = data[1 + i] == '/' || data[1 + i] == 0 ? '_' : (char)data[1 + i];
  name[len] = '\0';
  *size -= (size_t)(nl + 1 - data);
  return nl + 1;
}

/* ===== the oracle ===================================================================== */

static int64_t json_int(json_object *obj, const char *key) {
  json_object *v;
  return json_object_object_get_ex(obj, key, &v) && json_object_is_type(v, json_type_int)
             ? json_object_get_int64(v)
             : -1;
}

/* Whether a "files" entry names a plain file of the step directory and gives its true size
 * and CRC-32; *state is set if it is state.safetensors. */
static int entry_matches(json_object *f, int *state) {
  json_object *jname;
  if (!json_object_object_get_ex(f, "name", &jname) ||
      !json_object_is_type(jname, json_type_string))
    return 0;
  const char *name = json_object_get_string(jname);
  if (!name[0] || name[0] == '.' || strchr(name, '/')) return 0;
  char path[1024];
  uint32_t crc;
  snprintf(path, sizeof path, "%s/%s", fx.sdir, name);
  int64_t size = file_crc(path, &crc);
  *state |= strcmp(name, "state.safetensors") == 0;
  return size >= 0 && json_int(f, "bytes") == size && json_int(f, "crc32") == (int64_t)crc;
}

/* Whether `index` (len bytes) really describes step 20 and its files. */
static int index_matches(const char *index, size_t len) {
  json_tokener *tok = json_tokener_new();
  FUZZ_CHECK(tok != NULL, "out of memory");
  json_object *root = json_tokener_parse_ex(tok, index, (int)len), *files;
  json_tokener_free(tok);
  int ok = json_object_is_type(root, json_type_object) && json_int(root, "step") == STEP &&
           json_object_object_get_ex(root, "files", &files) &&
           json_object_is_type(files, json_type_array);
  int state = 0;
  for (size_t i = 0; ok && i < json_object_array_length(files); i++)
    ok = entry_matches(json_object_array_get_idx(files, i), &state);
  json_object_put(root);
  return ok && state;
}

/* An opened checkpoint must hold what setup() saved for `step`. */
static void check_state(const RtCkpt *ck, int64_t step) {
  float w[6];
  RtError err = {{0}};
  FUZZ_CHECK(rt_ckpt_step(ck) == step && rt_ckpt_data_position(ck) == 100 + step &&
                 rt_ckpt_rng_state(ck) == 7 && strcmp(rt_ckpt_config(ck), "{}") == 0,
             "opened step %lld, data position %lld: not what was saved as step %lld",
             (long long)rt_ckpt_step(ck), (long long)rt_ckpt_data_position(ck), (long long)step);
  FUZZ_CHECK(rt_st_read_f32(rt_ckpt_tensors(ck), "model/w", (int64_t[]){2, 3}, 2, w, &err) == 0 &&
                 memcmp(w, W, sizeof W) == 0,
             "step %lld: parameters differ from what was saved: %s", (long long)step, err.msg);
}

/* rt_ckpt_open of step 20; returns whether it opened. */
static int check_open(int canonical, const char *index, size_t len) {
  RtCkpt *ck = NULL;
  RtError err = {{0}};
  if (rt_ckpt_open(&ck, fx.dir, STEP, &err) != 0) {
    FUZZ_CHECK(ck == NULL && strstr(err.msg, fx.dir), "a refusal must name the checkpoint: '%s'",
               err.msg);
    return 0;
  }
  FUZZ_CHECK(canonical, "step %d opened from a directory that is not " STEP_DIR, STEP);
  FUZZ_CHECK(index_matches(index, len), "opened with an index that does not match the files:\n%.*s",
             (int)len, index);
  check_state(ck, STEP);
  rt_ckpt_close(ck);
  return 1;
}

static void check_open_latest(int canonical, int opened) {
  RtCkpt *ck = NULL;
  RtError warn = {{0}}, err = {{0}};
  int found = rt_ckpt_open_latest(&ck, fx.dir, &warn, &err);
  FUZZ_CHECK(found == 1, "no checkpoint opened, but step %d is intact: %d, '%s'", OLD_STEP, found,
             err.msg);
  check_state(ck, opened ? STEP : OLD_STEP);
  rt_ckpt_close(ck);
  if (canonical)
    FUZZ_CHECK(opened == !warn.msg[0], "step %d %s, but the warning is '%s'", STEP,
               opened ? "opened" : "is damaged", warn.msg);
}

/* ===== the target ===================================================================== */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  setup();
  char name[256], renamed[1024];
  data = split_name(data, &size, name, sizeof name);
  size_t len;
  char *index = expand(data, size, &len);
  fuzz_write_file(fx.index, index, len);
  int canonical = 1;
  if (name[0] && strcmp(name, ".") != 0 && strcmp(name, "..") != 0) {
    snprintf(renamed, sizeof renamed, "%s/%s", fx.dir, name);
    canonical = rename(fx.sdir, renamed) != 0 || strcmp(name, STEP_DIR) == 0;
  }
  int opened = check_open(canonical, index, len);
  check_open_latest(canonical, opened);
  if (!canonical)
    FUZZ_CHECK(rename(renamed, fx.sdir) == 0, "harness: cannot rename %s back", renamed);
  free(index);
  return 0;
}
