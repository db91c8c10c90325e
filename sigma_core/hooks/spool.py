"""Where a threaded hook's events wait once it is ``queue_size`` events behind: a file in the run directory, so
that a hook that records gets every event, in order, however slow it is, and memory stays bounded meanwhile."""

import pickle
import tempfile


class Spool:
    """Pickled events in the file ``name`` in ``run.directory``/spool (made when first written; for a loop without a
    directory, a temporary file), first in, first out; ``waiting`` of them unread. Its channel
    (:mod:`~sigma_core.hooks.dispatch`) holds a lock around each call."""

    def __init__(self, run, name: str):
        self.run, self.name, self.path, self.waiting, self._file, self._read = run, name, None, 0, None, 0

    def put(self, item) -> None:
        """Append ``item``; a value no file can hold raises (pickle's error) and nothing is written."""
        data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        if self._file is None:
            if self.run.loop.has_directory:  # asking a loop without one would make one
                self.path = self.run.directory / "spool" / self.name
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w+b") if self.path else tempfile.TemporaryFile()
        self._file.seek(0, 2)
        self._file.write(data)
        self.waiting += 1

    def get(self):
        """The oldest item unread; once none is left, the file starts again empty."""
        self._file.seek(self._read)
        item, self._read, self.waiting = pickle.load(self._file), self._file.tell(), self.waiting - 1
        if not self.waiting:
            self._read = self._file.truncate(0)
        return item

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)
