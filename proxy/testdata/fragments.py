"""A python3 websockets client for edge's interop tests: sends one message
of N bytes in K-byte fragments (send() with an iterator sends each item as
one fragment, RFC 6455 §5.4) and prints the close code it got as JSON.

    python3 fragments.py URL N K
"""
import asyncio
import json
import sys

import websockets


async def main(url, n, k):
    code, reason = 0, ""
    async with websockets.connect(url, compression=None, max_size=None) as ws:
        parts = [b"e" * min(k, n - off) for off in range(0, n, k)]
        try:
            await ws.send(iter(parts))
            await asyncio.wait_for(ws.wait_closed(), 30)
        except websockets.ConnectionClosed:
            pass
        except asyncio.TimeoutError:
            reason = "no close within 30s"
        if ws.close_code is not None:
            code, reason = ws.close_code, ws.close_reason
    print(json.dumps({"code": code, "reason": reason}))


asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
