"""Where a threaded hook's events wait once it has fallen ``queue_size`` events behind: a file in the run directory.

A hook that records (metrics files, TensorBoard, MLflow) must get every event, however slow it is, and a run must not
grow its memory without bound while it waits. Past its ``queue_size`` events in memory, the hook's channel
(:class:`~sigma_core.hooks.dispatch.Channel`) pickles each event here, on the training thread, and its thread reads
them back in the order they came; the file is emptied whenever the hook has caught up, and removed at the run's end.
"""

import pickle
from pathlib import Path


class Spool:
    """Pickled events in a file, first in, first out; ``waiting`` of them not read yet. Not thread-safe: the channel
    holds its lock around each call."""

    def __init__(self, path: Path):
        self.path, self.waiting = path, 0
        self._writer = self._reader = None

    def put(self, item) -> None:
        """Append ``item``; a pickling error (a value no file can hold) is the caller's to handle."""
        data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer, self._reader = self.path.open("wb"), self.path.open("rb")
        self._writer.write(data)
        self._writer.flush()
        self.waiting += 1

    def get(self):
        """The oldest item not read yet; once none is left, the file starts again empty."""
        item = pickle.load(self._reader)
        self.waiting -= 1
        if not self.waiting:
            self._writer.truncate(0)
            self._writer.seek(0)
            self._reader.seek(0)
        return item

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._reader.close()
            self.path.unlink(missing_ok=True)
