#!/usr/bin/env python3
"""A small IVR (answering menu) that drives a running CallNode through its control API only.

It answers every call that rings, plays a greeting and a menu, and then follows the caller's
DTMF digits:

    1   leave a message (after the beep; # ends it), saved as a WAV file
    2   hear the time (the hour, as beeps, on a 12-hour clock), then the menu again
    #   goodbye, and the call is hung up
    any other digit: the menu again

It speaks HTTP + JSON over the node's Unix socket (default $CALLNODE_HOME/control.sock, else
~/.callnode/control.sock): one long GET /v1/events read by a thread of its own, and one short
connection per request. Python 3.11, standard library only.

    callnode listen --accept-unknown --input silence      # terminal 1: the node
    python3 Examples/ivr/ivr.py                           # terminal 2: the IVR
"""

from __future__ import annotations

import argparse
import collections
import datetime
import http.client
import json
import os
import queue
import signal
import socket
import sys
import threading
import time

# Prompts: the file looked for in --prompts, and the tone played when it is not there.
TONES = {
    "greeting": (440.0, 1.0),
    "menu": (660.0, 1.0),
    "beep": (1000.0, 0.3),
    "goodbye": (520.0, 0.6),
}
HOUR_TONE = (880.0, 0.15)  # one beep per hour of the 12-hour clock ...
HOUR_GAP = 0.15            # ... with this much silence between them
# A prompt whose playback-finished never comes (an event lost with a dropped event stream) is
# taken as finished this long after its length.
PLAYBACK_SLACK = 5.0
# After a call ends mid-message, how long to wait for the node's recording-stopped event.
RECORDING_LINGER = 5.0


def say(line: str) -> None:
    print(line, flush=True)


def warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a Unix socket: the host name is only what the Host header says."""

    def __init__(self, path: str, timeout: float | None = 10.0):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class APIError(Exception):
    def __init__(self, method: str, path: str, status: int, reason: str):
        super().__init__(f"{method} {path}: {status} {reason}")
        self.status = status
        self.reason = reason


class Stop(Exception):
    """SIGTERM (Ctrl-C raises KeyboardInterrupt)."""


class NodeAPI:
    def __init__(self, path: str):
        self.path = path

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        """One request on a connection of its own; the JSON answer, or APIError."""
        conn = UnixHTTPConnection(self.path)
        try:
            headers = {}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except OSError as error:
            raise APIError(method, path, 0, f"cannot reach the node at {self.path}: {error}") from None
        finally:
            conn.close()
        try:
            answer = json.loads(raw) if raw.strip() else {}
        except ValueError:
            answer = {"error": raw.decode(errors="replace").strip()}
        if not 200 <= response.status < 300:
            reason = answer.get("error") if isinstance(answer, dict) else None
            raise APIError(method, path, response.status, reason or response.reason)
        return answer if isinstance(answer, dict) else {}

    def open_events(self) -> tuple[UnixHTTPConnection, http.client.HTTPResponse]:
        """GET /v1/events, kept open (no timeout: events come when they come)."""
        conn = UnixHTTPConnection(self.path, timeout=None)
        conn.request("GET", "/v1/events", headers={"Accept": "text/event-stream"})
        response = conn.getresponse()
        if response.status != 200:
            body = response.read().decode(errors="replace").strip()
            conn.close()
            raise APIError("GET", "/v1/events", response.status, body)
        return conn, response


def read_events(response: http.client.HTTPResponse, inbox: queue.Queue) -> None:
    """Server-sent events: `data:` lines up to a blank line make one event; `:` lines are
    comments. Each event's JSON object goes to `inbox`; the stream's end too, as None."""
    data: list[str] = []

    def dispatch() -> None:
        if not data:
            return
        text = "\n".join(data)
        data.clear()
        try:
            event = json.loads(text)
        except ValueError:
            warn(f"ivr: an event that is not JSON: {text!r}")
            return
        if isinstance(event, dict):
            inbox.put(("event", event))

    reason = None
    try:
        while True:
            raw = response.readline()
            if not raw:
                break
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if not line:
                dispatch()
            elif line.startswith(":"):
                continue
            elif line.startswith("data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(" ") else value)
            # `event:`, `id:`, `retry:` lines: the JSON says it all.
    except (OSError, http.client.HTTPException, ValueError) as error:
        reason = str(error) or type(error).__name__
    dispatch()  # the `dropped` notice ends without a blank line
    inbox.put(("closed", reason))


class Call:
    def __init__(self, call_id: str):
        self.id = call_id
        self.short = call_id[:8]
        self.mode = "ringing"  # ringing, menu, beep, recording, leaving, ended
        self.connected = False
        self.steps: collections.deque = collections.deque()
        self.playback: str | None = None     # the prompt playing, waited for
        self.playback_deadline: float | None = None
        self.pause_until: float | None = None
        self.recording: str | None = None    # the message's path while it records
        self.record_deadline: float | None = None
        self.linger_deadline: float | None = None  # ended: waiting for recording-stopped


class IVR:
    def __init__(self, args: argparse.Namespace):
        self.api = NodeAPI(args.socket)
        self.socket_path = args.socket
        self.prompts = os.path.abspath(args.prompts) if args.prompts else None
        self.messages = os.path.abspath(args.messages)
        self.max_message = args.max_message
        self.calls_to_serve = args.calls
        self.calls: dict[str, Call] = {}
        self.ended = 0
        self.inbox: queue.Queue = queue.Queue()
        self.events_conn: UnixHTTPConnection | None = None
        self.done = False

    # ---- requests ---------------------------------------------------------------------

    def request(self, call: Call | None, method: str, path: str, body: dict | None = None) -> dict | None:
        """A request whose failure is said on stderr and survived: None then."""
        try:
            return self.api.request(method, path, body)
        except APIError as error:
            where = f"call {call.short}: " if call else ""
            warn(f"ivr: {where}{error}")
            return None

    def call_path(self, call: Call, action: str) -> str:
        return f"/v1/calls/{call.id}/{action}"

    # ---- events -----------------------------------------------------------------------

    def start_events(self) -> None:
        conn, response = self.api.open_events()
        self.events_conn = conn
        threading.Thread(target=read_events, args=(response, self.inbox), name="events", daemon=True).start()

    def handle(self, event: dict) -> None:
        kind = event.get("event")
        call_id = event.get("call")
        if kind == "dropped":
            warn(f"ivr: the node dropped the event stream: {event.get('reason')}")
            return
        if not isinstance(call_id, str):
            return
        if kind == "incoming":
            self.incoming(call_id)
            return
        call = self.calls.get(call_id)
        if call is None:
            return  # not a call this IVR answered
        if kind == "connected":
            self.connected(call)
        elif kind == "dtmf":
            self.digit(call, str(event.get("digit", "")))
        elif kind in ("playback-finished", "playback-stopped"):
            # stopped: something else replaced or stopped the prompt (`callnode ctl play`);
            # the IVR's own stops forget the prompt first, so they do not match here.
            if call.playback is not None and event.get("playback") == call.playback:
                self.prompt_over(call)
        elif kind == "recording-stopped":
            if call.recording is not None and event.get("path") == call.recording:
                self.message_over(call, event)
        elif kind == "recording-failed":
            warn(f"ivr: call {call.short}: recording {event.get('path')} failed: {event.get('reason')}")
        elif kind == "ended":
            self.ended_call(call, event)

    def incoming(self, call_id: str) -> None:
        if call_id in self.calls:
            return
        call = Call(call_id)
        self.calls[call_id] = call
        # keep: the other callers stay connected (each hears its own prompts), not held.
        if self.request(call, "POST", self.call_path(call, "answer"), {"others": "keep"}) is not None:
            say(f"call {call.short}: answered")

    def connected(self, call: Call) -> None:
        if call.connected or call.mode == "ended":
            return
        call.connected = True
        call.mode = "menu"
        call.steps.extend([("prompt", "greeting"), ("prompt", "menu")])
        self.advance(call)

    def digit(self, call: Call, digit: str) -> None:
        if call.mode == "menu":
            self.stop_prompt(call)
            if digit == "1":
                call.mode = "beep"
                call.steps.extend([("prompt", "beep"), ("record",)])
            elif digit == "2":
                call.steps.extend(self.time_steps())
                call.steps.append(("prompt", "menu"))
            elif digit == "#":
                self.leave(call)
                return
            else:
                call.steps.append(("prompt", "menu"))
            self.advance(call)
        elif call.mode == "beep" and digit == "#":
            self.stop_prompt(call)
            self.leave(call)
        elif call.mode == "recording" and digit == "#":
            self.stop_recording(call)
        # leaving, ringing, ended: digits change nothing

    def ended_call(self, call: Call, event: dict) -> None:
        if call.mode == "ended":
            return
        say(f"call {call.short}: ended")
        call.mode = "ended"
        call.steps.clear()
        call.playback = call.playback_deadline = call.pause_until = None
        call.record_deadline = None
        if call.recording is not None:
            # The node stops the recording itself, and says so after the end.
            call.linger_deadline = time.monotonic() + RECORDING_LINGER
        else:
            self.forget(call)

    def forget(self, call: Call) -> None:
        if self.calls.pop(call.id, None) is None:
            return
        self.ended += 1
        if self.calls_to_serve and self.ended >= self.calls_to_serve:
            self.done = True

    # ---- prompts ----------------------------------------------------------------------

    def prompt_file(self, name: str) -> str | None:
        if self.prompts:
            path = os.path.join(self.prompts, name + ".wav")
            if os.path.isfile(path):
                return path
        return None

    def time_steps(self) -> list:
        hour = datetime.datetime.now().hour % 12 or 12
        steps: list = []
        if self.prompt_file("time"):
            steps.append(("prompt", "time"))  # "the time is ..."
        for i in range(hour):
            if i:
                steps.append(("pause", HOUR_GAP))
            steps.append(("play", {"tone": HOUR_TONE[0], "seconds": HOUR_TONE[1]}, None))
        steps.append(("pause", 0.5))
        return steps

    def prompt_bodies(self, name: str) -> list[dict]:
        """What to ask for, in order: the prompt's file if there is one, then its tone."""
        bodies = []
        path = self.prompt_file(name)
        if path:
            bodies.append({"file": path})
        if name in TONES:
            frequency, seconds = TONES[name]
            bodies.append({"tone": frequency, "seconds": seconds})
        return bodies

    def advance(self, call: Call) -> None:
        """Runs the call's next steps until one waits (a prompt playing, a pause)."""
        while call.mode != "ended" and call.playback is None and call.pause_until is None and call.steps:
            step = call.steps.popleft()
            if step[0] == "prompt":
                if step[1] == "menu":
                    say(f"call {call.short}: menu")
                for body in self.prompt_bodies(step[1]):
                    if self.play(call, body):
                        break
            elif step[0] == "play":
                self.play(call, step[1])
            elif step[0] == "pause":
                call.pause_until = time.monotonic() + step[1]
            elif step[0] == "record":
                self.start_recording(call)
            elif step[0] == "hangup":
                self.request(call, "POST", self.call_path(call, "hangup"))

    def play(self, call: Call, body: dict) -> bool:
        answer = self.request(call, "POST", self.call_path(call, "play"), body)
        if answer is None or not isinstance(answer.get("playback"), str):
            return False
        call.playback = answer["playback"]
        seconds = answer.get("seconds")
        length = float(seconds) if isinstance(seconds, (int, float)) else 60.0
        call.playback_deadline = time.monotonic() + length + PLAYBACK_SLACK
        return True

    def prompt_over(self, call: Call) -> None:
        call.playback = call.playback_deadline = None
        self.advance(call)

    def stop_prompt(self, call: Call) -> None:
        """Stops what plays and forgets what was to follow."""
        call.steps.clear()
        call.pause_until = None
        if call.playback is not None:
            call.playback = call.playback_deadline = None
            try:
                self.api.request("DELETE", self.call_path(call, "play"))
            except APIError as error:
                if error.status != 409:  # 409: it had just finished
                    warn(f"ivr: call {call.short}: {error}")

    def leave(self, call: Call) -> None:
        call.mode = "leaving"
        call.steps.clear()
        call.steps.extend([("prompt", "goodbye"), ("hangup",)])
        self.advance(call)

    # ---- messages ---------------------------------------------------------------------

    def start_recording(self, call: Call) -> None:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        path = os.path.join(self.messages, f"message-{stamp}-{call.short}.wav")
        try:
            os.makedirs(self.messages, exist_ok=True)
        except OSError as error:
            warn(f"ivr: cannot make {self.messages}: {error}")
        answer = self.request(call, "POST", self.call_path(call, "record"), {"path": path, "sides": "received"})
        if answer is None:
            self.leave(call)
            return
        call.mode = "recording"
        call.recording = path
        call.record_deadline = time.monotonic() + self.max_message

    def stop_recording(self, call: Call) -> None:
        call.record_deadline = None
        try:
            answer = self.api.request("DELETE", self.call_path(call, "record"))
        except APIError as error:
            if error.status == 409:
                # It stopped already (it failed, or the call is ending): its
                # recording-stopped event says how, or the linger gives up.
                call.linger_deadline = time.monotonic() + RECORDING_LINGER
            else:
                warn(f"ivr: call {call.short}: {error}")
                call.linger_deadline = time.monotonic() + RECORDING_LINGER
            return
        self.message_over(call, answer)

    def message_over(self, call: Call, stopped: dict) -> None:
        path = stopped.get("path") or call.recording
        seconds = stopped.get("seconds")
        call.recording = call.record_deadline = call.linger_deadline = None
        if isinstance(seconds, (int, float)):
            say(f"saved message {path} ({seconds:g} s)")
        else:
            warn(f"ivr: call {call.short}: the message was not saved: {stopped.get('reason', 'no reason given')}")
        if call.mode == "ended":
            self.forget(call)
        else:
            self.leave(call)

    # ---- the loop ---------------------------------------------------------------------

    def timers(self) -> float:
        """Runs what is due; the seconds until the next thing due (at most 1)."""
        now = time.monotonic()
        wait = 1.0
        for call in list(self.calls.values()):
            if call.linger_deadline is not None and now >= call.linger_deadline:
                if call.recording is not None:
                    warn(f"ivr: call {call.short}: the node never said the recording stopped; "
                         f"it may still be at {call.recording}")
                call.recording = call.linger_deadline = None
                if call.mode == "ended":
                    self.forget(call)
                else:
                    self.leave(call)
                continue
            if call.record_deadline is not None and now >= call.record_deadline:
                self.stop_recording(call)
            if call.pause_until is not None and now >= call.pause_until:
                call.pause_until = None
                self.advance(call)
            if call.playback_deadline is not None and now >= call.playback_deadline:
                warn(f"ivr: call {call.short}: no playback-finished for {call.playback}; going on")
                self.prompt_over(call)
            for deadline in (call.linger_deadline, call.record_deadline, call.pause_until, call.playback_deadline):
                if deadline is not None:
                    wait = min(wait, max(0.0, deadline - time.monotonic()))
        return wait

    def answer_ringing(self) -> None:
        """Calls that rang before the IVR started."""
        answer = self.request(None, "GET", "/v1/calls")
        for described in (answer or {}).get("calls", []):
            if described.get("direction") == "incoming" and described.get("status") == "ringing":
                self.incoming(described["id"])

    def reopen_events(self, reason: str | None) -> bool:
        """The stream ended: open it again if the node is still there."""
        for _ in range(3):
            time.sleep(0.5)
            try:
                self.start_events()
            except (OSError, APIError, http.client.HTTPException):
                continue
            warn(f"ivr: the event stream ended ({reason or 'closed'}); reopened it")
            return True
        return False

    def run(self) -> int:
        self.start_events()
        say(f"ivr: serving the node at {self.socket_path}")
        self.answer_ringing()
        while not self.done:
            try:
                kind, value = self.inbox.get(timeout=self.timers())
            except queue.Empty:
                continue
            if kind == "event":
                self.handle(value)
            elif kind == "closed":
                if not self.reopen_events(value):
                    warn(f"ivr: the node at {self.socket_path} closed the event stream"
                         f"{f' ({value})' if value else ''} and no longer answers")
                    return 1
        return 0

    def shutdown(self) -> None:
        """Ctrl-C or SIGTERM: messages being recorded are saved, the IVR's calls hung up."""
        for call in list(self.calls.values()):
            if call.mode == "ended":
                continue
            if call.recording is not None:
                try:
                    stopped = self.api.request("DELETE", self.call_path(call, "record"))
                    if isinstance(stopped.get("seconds"), (int, float)):
                        say(f"saved message {stopped.get('path', call.recording)} ({stopped['seconds']:g} s)")
                except APIError as error:
                    warn(f"ivr: call {call.short}: {error}")
            try:
                self.api.request("POST", self.call_path(call, "hangup"))
            except APIError as error:
                warn(f"ivr: call {call.short}: {error}")
        self.close_events()

    def close_events(self) -> None:
        conn = self.events_conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


def default_socket() -> str:
    home = os.environ.get("CALLNODE_HOME") or os.path.join(os.path.expanduser("~"), ".callnode")
    return os.path.join(home, "control.sock")


def positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be a positive number")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="An answering menu (IVR) for a running CallNode, through its control API.")
    parser.add_argument("--socket", default=default_socket(), metavar="PATH",
                        help="the node's control socket (default: $CALLNODE_HOME/control.sock, "
                             "else ~/.callnode/control.sock; now %(default)s)")
    parser.add_argument("--prompts", metavar="DIR",
                        help="WAV prompts: greeting.wav, menu.wav, beep.wav, goodbye.wav, time.wav "
                             "(each optional; a missing one is a tone)")
    parser.add_argument("--messages", default="./messages", metavar="DIR",
                        help="where messages are saved (default ./messages)")
    parser.add_argument("--max-message", type=positive, default=30.0, metavar="SECONDS",
                        help="the longest message (default 30)")
    parser.add_argument("--calls", type=int, default=0, metavar="N",
                        help="exit after N calls have ended (default: serve until Ctrl-C)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.socket = os.path.abspath(os.path.expanduser(args.socket))
    start_hint = ("start a node first, e.g. `callnode listen --accept-unknown --input silence` "
                  "(it serves HOME/control.sock; give --socket PATH for another)")
    if not os.path.exists(args.socket):
        warn(f"ivr: no control socket at {args.socket}: {start_hint}")
        return 1
    ivr = IVR(args)

    def terminate(signum, frame):
        raise Stop()

    signal.signal(signal.SIGTERM, terminate)
    try:
        try:
            return ivr.run()
        except (ConnectionRefusedError, FileNotFoundError) as error:
            warn(f"ivr: no node answers at {args.socket} ({error.strerror}): {start_hint}")
            return 1
        except APIError as error:
            warn(f"ivr: {error}")
            return 1
        finally:
            if ivr.done:
                ivr.close_events()
    except (KeyboardInterrupt, Stop):
        # A second Ctrl-C or SIGTERM ends it at once.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        ivr.shutdown()
        say("ivr: stopped")
        return 0


if __name__ == "__main__":
    sys.exit(main())
