"""The driver log into the run's storage as it is written: immutable parts cut at line ends
(``logs/<attempt id>/part-NNNNNN``, rtjob_contract.log_part_name), each masked before it leaves the node.

The companion reads the file Ray writes the driver's output to (its own stdout) through a second descriptor, so
the entrypoint writes as it always did: nothing between it and its log, and the parts joined are the driver's
file, masked. A part ends at a line end (a secret never spans two parts) unless it is the last; a part is at most
PART_MAX bytes, so a 40 MiB burst becomes several parts and nothing is read whole. What could not be uploaded is
tried again at the next flush: the parts stay in order and none is skipped. The masked bytes are also kept in a
local file, which becomes ``logs/<attempt id>.log`` and ``logs/driver.log`` when the attempt ends; when storage
does not take them before the companion must go, ``keep`` leaves the whole masked log in the kept node folder
(storage/node_dirs.py), from where `rtjob sync` stores it."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable

import rtjob_contract as contract

from ..core.end_words import COMPANION_PREFIX
from ..core.errors import RtjobError, one_line
from ..core.redact import Redactor
from ..storage.objects import Objects

PART_MAX = 8 * 1024 * 1024
# New output goes up soon after it is written (``due``), not only at the companion's regular flush: a part once the
# log has had new bytes for NEW_OUTPUT_S (a burst of lines becomes one part, not one each); after a flush that found
# new bytes but no whole line (a progress bar redrawn with \r and no line end), or failed to upload, not again for
# IDLE_AFTER_NOTHING_S. At most one part every PART_GAP_S from a steady stream (each upload costs CPU: S3 signing).
NEW_OUTPUT_S = 0.5
PART_GAP_S = 1.0
IDLE_AFTER_NOTHING_S = 5.0


class LogParts:
    """Parts of the log file at ``source`` for attempt ``attempt_id``; ``objects``: the run's folder."""

    def __init__(self, source: str, objects: Objects, attempt_id: str, secrets: Iterable[str],
                 say: Callable[[str], None], on_text: Callable[[bytes], None] | None = None) -> None:
        self.source = source
        self.objects = objects
        self.attempt_id = attempt_id
        self.redactor = Redactor()
        self.redactor.add(secrets)
        self.say = say
        self.on_text = on_text  # every new stretch of the log, as read (the timeline watches it)
        self.offset = 0  # bytes of the source already uploaded
        self.index = 0  # the next part's number
        self.failed = False
        self._whole = tempfile.NamedTemporaryFile(prefix="rtjob-log-", delete=False)  # noqa: SIM115
        self.first_bytes_at: float | None = None
        self._grew_at: float | None = None  # monotonic time new bytes were first seen since the last flush
        self._quiet_until = 0.0
        self._flushed_at = 0.0  # monotonic time of the last flush
        self.whole_written: set[str] = set()  # which of the attempt's whole logs are stored
        self.fault: Exception | None = None  # the last upload's failure (None: the last upload went through)

    def due(self, now: float) -> bool:
        """Whether the log has new output worth a flush now (one stat of the file)."""
        if now < self._quiet_until:
            return False
        try:
            size = os.stat(self.source).st_size
        except OSError:
            return False
        if size <= self.offset:
            self._grew_at = None
            return False
        if self._grew_at is None:
            self._grew_at = now
        return now - self._grew_at >= NEW_OUTPUT_S and now - self._flushed_at >= PART_GAP_S

    def flush(self, final: bool = False) -> int:
        """Upload what the log gained since the last flush (up to its last line end, or all of it when
        ``final``); returns the parts uploaded. Failures are said once and retried at the next flush."""
        uploaded = 0
        held_back = False  # new bytes, but no whole line among them
        self._grew_at = None
        self._flushed_at = time.monotonic()
        try:
            fd = os.open(self.source, os.O_RDONLY)
        except OSError as exc:
            self._fail(f"cannot read the driver log {self.source}: {exc.strerror or exc}")
            return 0
        try:
            while True:
                os.lseek(fd, self.offset, os.SEEK_SET)
                chunk = os.read(fd, PART_MAX)
                if not chunk:
                    break
                if len(chunk) == PART_MAX or not final:
                    cut = chunk.rfind(b"\n")
                    if cut < 0:
                        if len(chunk) < PART_MAX:
                            held_back = True
                            break  # a line still being written: it goes with the next flush
                        cut = len(chunk) - 1  # one line longer than a part: cut it anyway
                    chunk = chunk[:cut + 1]
                if self.on_text is not None:
                    self.on_text(chunk)
                masked = self.redactor.text(chunk.decode("utf-8", errors="replace")).encode("utf-8")
                try:
                    self.objects.put(contract.log_part_name(self.attempt_id, self.index), masked)
                except (RtjobError, OSError) as exc:
                    self.fault = exc
                    self._fail(f"log part {self.index} not uploaded (tried again): {one_line(exc)}")
                    held_back = True
                    break
                self._whole.write(masked)
                self.failed, self.fault = False, None
                self.offset += len(chunk)
                self.index += 1
                uploaded += 1
        finally:
            os.close(fd)
        if held_back and not uploaded:  # no early flush again soon: the regular one, or IDLE_AFTER_NOTHING_S
            self._quiet_until = time.monotonic() + IDLE_AFTER_NOTHING_S
        return uploaded

    def unread(self) -> int:
        """Bytes of the driver log not uploaded as parts yet."""
        try:
            return max(0, os.stat(self.source).st_size - self.offset)
        except OSError:
            return 0

    def whole_names(self) -> list[str]:
        """The attempt's whole logs, relative to the run's folder."""
        return [f"{contract.RUN_LOGS_DIR}/{name}"
                for name in (contract.attempt_log_name(self.attempt_id), contract.DRIVER_LOG_FILE)]

    @property
    def stored(self) -> bool:
        """Every byte of the log is in storage as parts, and both whole logs are written."""
        return self.unread() == 0 and self.whole_written == set(self.whole_names())

    def write_whole(self) -> list[str]:
        """The attempt's whole log (every part joined; the parts stay): ``logs/<attempt id>.log``, and
        ``logs/driver.log`` (the run's latest attempt's), each until it is stored (called again, it writes what is
        missing). Returns the names written, relative to the run's folder."""
        self._whole.flush()
        for rel in self.whole_names():
            if rel in self.whole_written:
                continue
            try:
                self.objects.put_file(rel, self._whole.name)
                self.whole_written.add(rel)
                self.fault = None
            except (RtjobError, OSError) as exc:
                self.fault = exc
                self._fail(f"{rel} not uploaded yet (tried again): {one_line(exc)}")
        return [rel for rel in self.whole_names() if rel in self.whole_written]

    def keep(self, folder: str) -> str:
        """The whole masked log, with what its parts did not store, as ``folder``/<attempt id>.log (the kept node
        folder's copy; `rtjob sync` uploads it). Returns its path."""
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = os.path.join(folder, contract.attempt_log_name(self.attempt_id))
        self._whole.flush()
        with open(self._whole.name, "rb") as src, open(path, "wb") as out:
            while block := src.read(1 << 20):
                out.write(block)
            try:
                fd = os.open(self.source, os.O_RDONLY)
            except OSError:
                return path
            try:
                os.lseek(fd, self.offset, os.SEEK_SET)
                rest = b""
                while chunk := os.read(fd, PART_MAX):
                    rest += chunk
                out.write(self.redactor.text(rest.decode("utf-8", errors="replace")).encode("utf-8"))
            finally:
                os.close(fd)
        return path

    def close(self) -> None:
        self._whole.close()
        with contextlib.suppress(OSError):
            os.unlink(self._whole.name)

    def _fail(self, text: str) -> None:
        if not self.failed:  # one line per stretch of failures, not one per flush
            self.say(f"{COMPANION_PREFIX} {text}")
        self.failed = True
