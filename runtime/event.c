/* event.c: the trainer's event lines and the message rewording switch (axrt_event.h). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "axrt.h"

const RtCauseInfo rt_causes[RT_CAUSE_COUNT] = {
#define RT_CAUSE_ROW(id, name, status, what, blames) [id] = {name, status, what, blames},
    RT_CAUSES(RT_CAUSE_ROW)
#undef RT_CAUSE_ROW
};

int rt_cause_find(const char *name) {
    for (int i = 0; name && i < RT_CAUSE_COUNT; i++)
        if (!strcmp(rt_causes[i].name, name))
            return i;
    return -1;
}

static int env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* s as a JSON string's contents into out (cap bytes): quotes, backslashes and control
 * characters escaped, cut short where it does not fit. */
static void json_text(const char *s, char *out, size_t cap) {
    size_t n = 0;
    for (; *s && n + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            n += (size_t)snprintf(out + n, cap - n, "\\%c", c);
        else if (c < 0x20)
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        else
            out[n++] = (char)c;
    }
    out[n] = 0;
}

/* One event line, written whole with one call and flushed. */
static void event_line(const char *json) {
    fflush(stdout);
    fprintf(stderr, "%s%s\n", RT_EVENT_PREFIX, json);
    fflush(stderr);
}

void rt_event_failure(RtCause cause, int rank, int64_t step, const char *tensor) {
    if (!env_on(RT_EVENT_ENV) || (unsigned)cause >= RT_CAUSE_COUNT)
        return;
    char name[512] = "", line[768];
    if (tensor)
        json_text(tensor, name, sizeof name);
    snprintf(line, sizeof line, "{\"event\":\"failure\",\"cause\":\"%s\",\"rank\":%d,\"step\":%lld%s%s%s}",
             rt_causes[cause].name, rank, (long long)step, tensor ? ",\"tensor\":\"" : "", name, tensor ? "\"" : "");
    event_line(line);
}

void rt_event_resumed(int rank, int64_t step) {
    if (!env_on(RT_EVENT_ENV))
        return;
    char line[128];
    snprintf(line, sizeof line, "{\"event\":\"resumed\",\"rank\":%d,\"step\":%lld}", rank, (long long)step);
    event_line(line);
}

const char *rt_event_text(const char *text, char *buf, size_t cap) {
    if (!env_on(RT_REWORD_ENV) || cap < 16)
        return text;
    size_t n = (size_t)snprintf(buf, cap, "REWORDED ");
    for (const char *s = text; *s && n + 1 < cap; s++)
        buf[n++] = (char)toupper((unsigned char)*s);
    buf[n] = 0;
    return buf;
}
