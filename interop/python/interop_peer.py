"""Python websockets (Debian's python3-websockets) as a peer of rally.

Run with /usr/bin/python3, for rally's Go interop tests:

  interop_peer.py client URL CASE [ARGS_JSON]
      runs one case against a rally echo server and prints one JSON object:
      what the client saw.
  interop_peer.py server
      serves on 127.0.0.1, prints {"port": N}, then one JSON line per event
      of every connection ("message", "close"), until stdin closes. It
      echoes every message; a text "close CODE REASON" makes it close with
      that code and reason.
"""

import asyncio
import json
import sys

import websockets
from websockets.exceptions import ConnectionClosed


def emit(obj):
    print(json.dumps(obj), flush=True)


def closed_info(e):
    """What a ConnectionClosed says: the close frame received and sent."""
    info = {"received": None, "sent": None}
    if e.rcvd is not None:
        info["received"] = {"code": e.rcvd.code, "reason": e.rcvd.reason}
    if e.sent is not None:
        info["sent"] = {"code": e.sent.code, "reason": e.sent.reason}
    return info


async def client(url, case, args):
    async with websockets.connect(url, open_timeout=10, close_timeout=5) as ws:
        result = {"extensions": [str(type(x).__name__) for x in ws.extensions], "subprotocol": ws.subprotocol}
        if case == "connect":
            pass
        elif case == "echo":
            kind = args[0]
            sent = {
                "text": "héllo wörld € 😀 ✓",
                "empty-text": "",
                "binary": bytes((i * 7) & 0xFF for i in range(70000)),
                "empty-binary": b"",
            }[kind]
            await ws.send(sent)
            got = await asyncio.wait_for(ws.recv(), 10)
            result.update({"type": type(got).__name__, "equal": got == sent, "length": len(got)})
        elif case == "close":
            code, reason = args
            await ws.close(code=code, reason=reason)
            result.update({"close_code": ws.close_code, "close_reason": ws.close_reason})
            return result
        elif case == "serverClose":
            await ws.send(args[0])
            try:
                await asyncio.wait_for(ws.recv(), 10)
                result["error"] = "got a message, want the close"
            except ConnectionClosed as e:
                result.update(closed_info(e))
            return result
        await ws.close()
        result.update({"close_code": ws.close_code, "close_reason": ws.close_reason})
        return result


async def handler(ws, path=None):
    try:
        async for msg in ws:
            if isinstance(msg, str) and msg.startswith("close "):
                code, _, reason = msg[len("close "):].partition(" ")
                await ws.close(code=int(code), reason=reason)
                break
            kind = "text" if isinstance(msg, str) else "binary"
            data = msg.encode() if isinstance(msg, str) else msg
            emit({"ev": "message", "type": kind, "data": data.hex()})
            await ws.send(msg)
    except ConnectionClosed:
        pass
    await ws.wait_closed()
    emit({"ev": "close", "code": ws.close_code, "reason": ws.close_reason})


async def server():
    async with websockets.serve(handler, "127.0.0.1", 0, close_timeout=5) as srv:
        port = next(iter(srv.sockets)).getsockname()[1]
        emit({"port": port})
        loop = asyncio.get_running_loop()
        # Serve until the test closes stdin.
        await loop.run_in_executor(None, sys.stdin.read)


def main():
    if sys.argv[1] == "client":
        args = json.loads(sys.argv[4]) if len(sys.argv) > 4 else []
        try:
            emit(asyncio.run(asyncio.wait_for(client(sys.argv[2], sys.argv[3], args), 20)))
        except Exception as e:  # the test reads the failure from the result
            emit({"error": f"{type(e).__name__}: {e}"})
    else:
        asyncio.run(server())


if __name__ == "__main__":
    main()
