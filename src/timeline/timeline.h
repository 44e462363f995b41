/* The timeline: a Chrome trace-event file (JSON array) of what the core does to each named
 * tensor, viewable in chrome://tracing or Perfetto, in the reference's format: each tensor is
 * a "process" (pid = order of first appearance, named by a process_name metadata event),
 * activities are B/E pairs (NEGOTIATE_ALLREDUCE, ALLREDUCE, MEMCPY_IN_FUSION_BUFFER, ...),
 * a rank becoming ready is an X event named by the rank, cycle marks are instant events.
 *
 * The file is valid JSON after every event, so a job that is killed leaves a readable
 * timeline: every write is one pwrite of ",\n<event>\n]" that overwrites the previous
 * closing bracket. One exception no writer can avoid: a write that crosses into a new page
 * and is hit by SIGKILL stops at the page boundary (the kernel checks for a fatal signal
 * between pages), leaving the last event cut; every event before it is whole, and the trace
 * viewers, for which the closing bracket is optional, still load the file. (Each write must
 * replace the old bracket and add the new one, so some write has to span every page
 * boundary.) Thread safe (one lock); a write error disables the timeline with one warning
 * instead of failing the job. */
#ifndef HVD_TIMELINE_TIMELINE_H
#define HVD_TIMELINE_TIMELINE_H

#include <hvd/types.h>

#include <stdint.h>

typedef struct hvd_timeline hvd_timeline_t;

/* Create or truncate path and write the header events. HVD_ERR_IO naming the path. */
hvd_status_t hvd__timeline_open(const char *path, hvd_timeline_t **tl_p);
/* Close the file (it is already complete). NULL is ignored. */
void hvd__timeline_close(hvd_timeline_t *tl);

/* Microseconds since the timeline started (the ts of the events written now). */
int64_t hvd__timeline_now(const hvd_timeline_t *tl);

/* Start activity (e.g. "ALLREDUCE") on tensor. */
void hvd__timeline_begin(hvd_timeline_t *tl, const char *tensor, const char *activity);
/* End the innermost open activity on tensor; args_json, when not NULL, is a JSON object
 * written as the event's "args" (the caller builds it, e.g. {"dtype": "float32"}). */
void hvd__timeline_end(hvd_timeline_t *tl, const char *tensor, const char *args_json);
/* Rank became ready for tensor during negotiation: an X event of zero duration. */
void hvd__timeline_rank_ready(hvd_timeline_t *tl, const char *tensor, int rank);
/* A global instant event, e.g. "CYCLE_START". */
void hvd__timeline_instant(hvd_timeline_t *tl, const char *name);

/* Write s as the contents of a JSON string (escaped, without quotes) into out; returns the
 * length written, always NUL-terminated, truncated to fit out_size. */
size_t hvd__json_escape(const char *s, char *out, size_t out_size);

#endif
