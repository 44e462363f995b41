"""horovod.runner.util.threads, as Horovod's: in_thread runs a function on a thread of its own."""
import threading
import traceback


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Start target(*args) on a new thread and return the thread. daemon: the thread does not
    keep the interpreter alive; silent: an exception the function raises is not printed."""
    def run():
        try:
            target(*args)
        except BaseException:  # noqa: B902 (printed, as a thread's uncaught error would be)
            if not silent:
                traceback.print_exc()
    thread = threading.Thread(target=run, name=name, daemon=daemon)
    thread.start()
    return thread
