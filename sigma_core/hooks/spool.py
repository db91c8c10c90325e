"""Where a threaded hook's events wait once it is ``queue_size`` events behind: a file in the run directory, so
that a hook that records gets every event, in order, however slow it is, and memory stays bounded meanwhile.
The file is written and read a :data:`BATCH` at a time: per event, a system call on the training thread and a
read on the hook's (which takes the interpreter from training) cost more than the pickling."""

import collections
import pickle
import tempfile

#: Events written to, and read from, the file at a time: at most twice this many wait in memory, pickled.
BATCH = 256


class Spool:
    """Pickled events in the file ``name`` in ``run.directory``/spool (made at the first event; for a loop without a
    directory, a temporary file), first in, first out; ``waiting`` of them unread. Its channel
    (:mod:`~sigma_core.hooks.dispatch`) holds a lock around each call."""

    def __init__(self, run, name: str):
        self.run, self.name, self.path, self.waiting, self._file = run, name, None, 0, None
        self._read = self._written = 0  # file offsets: what was read, what was written
        self._writing, self._reading = [], collections.deque()  # pickled events: to write; read, not yet taken

    def put(self, item) -> None:
        """Append ``item``; a value no file can hold raises (pickle's error) and nothing is kept."""
        self._writing.append(pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))
        self.waiting += 1
        if self._file is None:
            if self.run.loop.has_directory:  # asking a loop without one would make one
                self.path = self.run.directory / "spool" / self.name
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w+b") if self.path else tempfile.TemporaryFile()
        if len(self._writing) < BATCH:
            return
        self._file.seek(self._written)
        self._file.write(pickle.dumps(self._writing, protocol=pickle.HIGHEST_PROTOCOL))
        self._written, self._writing = self._file.tell(), []

    def get(self):
        """The oldest item unread; once none is left, the file starts again empty."""
        if not self._reading:
            if self._read < self._written:
                self._file.seek(self._read)
                self._reading.extend(pickle.load(self._file))
                self._read = self._file.tell()
            else:
                self._reading.extend(self._writing)
                self._writing = []
        item, self.waiting = pickle.loads(self._reading.popleft()), self.waiting - 1
        if not self.waiting:
            self._read = self._written = self._file.truncate(0)
        return item

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)
