/* The timeline writer: the file parses as JSON (checked with Python's json module) after a
 * normal close and after the writing process is killed mid-stream; tensor names with quotes,
 * backslashes and control characters are escaped; each tensor gets one process_name and a
 * stable pid; B/E/X/i events carry what the reference's viewer expects. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "timeline/timeline.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char path[64];

static int setup(void **state) {
    (void)state;
    snprintf(path, sizeof path, "/tmp/hvd-timeline-test.%d.json", (int)getpid());
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(path);
    return 0;
}

/* Run a Python script with json imported and the file's path as `path`. Returns the exit
 * status (0 = the assertions held). */
static int py_run(const char *script) {
    const char *py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s -c 'import json; path=\"%s\"; %s'", py, path, script);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* ... over the file parsed: the script gets the list as `ev`. */
static int py_check(const char *script) {
    char full[3072];
    snprintf(full, sizeof full, "ev=json.load(open(path)); %s", script);
    return py_run(full);
}

static void test_events_and_escaping(void **state) {
    (void)state;
    hvd_timeline_t *tl;
    assert_int_equal(hvd__timeline_open(path, &tl), HVD_OK);
    hvd__timeline_begin(tl, "grad/\"w\"\\1\n", "NEGOTIATE_ALLREDUCE");
    hvd__timeline_rank_ready(tl, "grad/\"w\"\\1\n", 0);
    hvd__timeline_rank_ready(tl, "grad/\"w\"\\1\n", 1);
    hvd__timeline_end(tl, "grad/\"w\"\\1\n", NULL);
    hvd__timeline_begin(tl, "b", "ALLREDUCE");
    hvd__timeline_begin(tl, "b", "MEMCPY_IN_FUSION_BUFFER");
    hvd__timeline_end(tl, "b", NULL);
    hvd__timeline_end(tl, "b", "{\"dtype\": \"float32\", \"shape\": \"[17]\"}");
    hvd__timeline_instant(tl, "CYCLE_START");
    hvd__timeline_close(tl);
    assert_int_equal(
        py_check("names=[e[\"args\"][\"name\"] for e in ev if e.get(\"name\")==\"process_name\" "
                 "and e[\"pid\"]>0]; "
                 "assert names==[\"grad/\\\"w\\\"\\\\1\\n\", \"b\"], names; "
                 "assert ev[0][\"args\"][\"start_time_since_epoch_in_micros\"]>0; "
                 "b=[e for e in ev if e[\"ph\"]==\"B\"]; "
                 "assert [e[\"name\"] for e in b]==[\"NEGOTIATE_ALLREDUCE\",\"ALLREDUCE\","
                 "\"MEMCPY_IN_FUSION_BUFFER\"]; "
                 "assert b[0][\"pid\"]==1 and b[1][\"pid\"]==2; "
                 "x=[e[\"name\"] for e in ev if e[\"ph\"]==\"X\"]; assert x==[\"0\",\"1\"]; "
                 "E=[e for e in ev if e[\"ph\"]==\"E\"]; assert len(E)==3; "
                 "assert E[2][\"args\"][\"dtype\"]==\"float32\"; "
                 "assert any(e[\"ph\"]==\"i\" and e[\"name\"]==\"CYCLE_START\" for e in ev); "
                 "ts=[e[\"ts\"] for e in ev if \"ts\" in e]; assert ts==sorted(ts)"),
        0);
}

static void test_valid_after_kill(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        hvd_timeline_t *tl;
        if (hvd__timeline_open(path, &tl) != HVD_OK)
            _exit(1);
        for (unsigned i = 0;; i++) {
            char name[32];
            snprintf(name, sizeof name, "tensor.%u", i % 50);
            hvd__timeline_begin(tl, name, "ALLREDUCE");
            hvd__timeline_end(tl, name, NULL);
        }
    }
    usleep(200 * 1000);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status));
    /* Valid JSON, or else the kernel cut the last write where it crosses into a new page (a
     * write stops between pages when SIGKILL is pending): then the file ends at a page
     * boundary inside its last event, and everything before that event is whole. */
    assert_int_equal(py_run("b=open(path,\"rb\").read(); s=b.decode()\n"
                            "try: ev=json.loads(s)\n"
                            "except ValueError:\n"
                            "    assert len(b)%4096==0, (len(b), s[-200:])\n"
                            "    ev=json.loads(s[:s.rindex(\"\\n,\\n\")]+\"\\n]\")\n"
                            "assert len(ev)>100, len(ev); assert ev[-1][\"ph\"] in \"BEM\""),
                     0);
}

static void test_open_failure_names_path(void **state) {
    (void)state;
    hvd_timeline_t *tl;
    assert_int_equal(hvd__timeline_open("/nonexistent-dir/t.json", &tl), HVD_ERR_IO);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events_and_escaping),
        cmocka_unit_test(test_valid_after_kill),
        cmocka_unit_test(test_open_failure_names_path),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
