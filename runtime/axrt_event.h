/*
 * axrt_event.h: what a trainer tells the supervisor that runs it (launch/supervise.c), in data
 * rather than prose, so that rewording a message never changes what the supervisor does.
 *
 * Two channels, both defined here and nowhere else:
 * - the exit status (RT_EXIT_*), which mpirun passes on for the first rank that failed and srun
 *   for the highest;
 * - one event line per event on stderr, written whole and flushed, when the supervisor asked for
 *   them (RT_EVENT_ENV=1 in the environment, which it passes to every rank):
 *     axlc-event: {"event":"failure","cause":"nonfinite","rank":1,"step":12,"tensor":"loss"}
 *     axlc-event: {"event":"resumed","rank":0,"step":10}
 *   "rank" is the rank the event is about (a watchdog names the rank that stopped answering, not
 *   itself); "step" the step it happened at (-1: none); "tensor" the tensor it names, when one.
 *
 * A new failure cause is one row of RT_CAUSES, the call that reports it where the trainer finds
 * it, and a test in tests/mpi/launch.sh (docs/extending.md, "A supervisor failure cause").
 * Included by axrt.h; it needs nothing else of it.
 */
#ifndef AXRT_EVENT_H
#define AXRT_EVENT_H

#include <stddef.h>
#include <stdint.h>

/* The trainer's exit statuses besides 0 (done), 1 (an error, the message says which) and 128 +
 * a signal (stopped by SIGINT or SIGTERM, after saving): */
#define RT_EXIT_NONFINITE 3 /* the loss, gradient norm or weights went non-finite (nothing saved) */
#define RT_EXIT_SDC       4 /* --sdc-check-every: a step's replay differed (the rank is named) */

#define RT_EVENT_PREFIX "axlc-event: " /* an event line starts so; the JSON object follows */
#define RT_EVENT_ENV    "AXLC_EVENTS"  /* "1": write event lines */
/* "1": every message the trainer prints about a failure is reworded (upper case, with a prefix),
 * for the test that the supervisor reads none of them (mpi_launch_reworded). */
#define RT_REWORD_ENV "AXLC_REWORD_MESSAGES"

/* The failure causes: the enum, the name in the event line, the exit status that says it alone
 * (0: none), what the supervisor's log calls it, and whether it blames the rank it names (a
 * non-finite value comes out the same on every rank). */
#define RT_CAUSES(X)                                                                                                   \
    X(RT_CAUSE_NONFINITE, "nonfinite", RT_EXIT_NONFINITE, "a non-finite value", 0)                                     \
    X(RT_CAUSE_SDC, "sdc", RT_EXIT_SDC, "silent data corruption", 1)                                                   \
    X(RT_CAUSE_WATCHDOG, "watchdog", 0, "stopped answering (the watchdog)", 1)

typedef enum RtCause {
#define RT_CAUSE_ENUM(id, name, status, what, blames) id,
    RT_CAUSES(RT_CAUSE_ENUM)
#undef RT_CAUSE_ENUM
        RT_CAUSE_COUNT
} RtCause;

typedef struct RtCauseInfo {
    const char *name; /* "nonfinite" */
    int status;       /* RT_EXIT_NONFINITE, or 0 */
    const char *what; /* "a non-finite value" */
    int blames;       /* the rank named is the one at fault */
} RtCauseInfo;
extern const RtCauseInfo rt_causes[RT_CAUSE_COUNT];
/* The cause named `name` in an event line, or -1. */
int rt_cause_find(const char *name);

/* Writes the failure event (when RT_EVENT_ENV asks for events): cause, the rank it is about,
 * the step (-1: none) and the tensor it names (NULL: none). */
void rt_event_failure(RtCause cause, int rank, int64_t step, const char *tensor);
/* Writes the event that rank `rank` resumed from the checkpoint of step `step`. */
void rt_event_resumed(int rank, int64_t step);
/* The text of a message as the trainer prints it: `text` itself, or, when RT_REWORD_ENV is set,
 * a rewording of it in buf (cap bytes). */
const char *rt_event_text(const char *text, char *buf, size_t cap);

#endif /* AXRT_EVENT_H */
