"""A python3 websockets client (deflate on by default: it offers
"permessage-deflate; client_max_window_bits") for edge's deflate tests:
sends one compressible text message of N bytes, waits for its echo and
prints {"answer", "echoed", "size", "code"} as JSON; answer is the 101's
Sec-WebSocket-Extensions.

    python3 deflateclient.py URL N
"""
import asyncio
import json
import sys

import websockets


async def main(url, n):
    res = {"answer": "", "echoed": 0, "size": 0, "code": 0}
    async with websockets.connect(url, max_size=None) as ws:
        res["answer"] = ws.response_headers.get("Sec-WebSocket-Extensions", "")
        await ws.send(("hello edge " * (n // 11 + 1))[:n])
        got = await asyncio.wait_for(ws.recv(), 30)
        res["echoed"], res["size"] = 1, len(got)
        await ws.close(1000)
        res["code"] = ws.close_code
    print(json.dumps(res))


asyncio.run(main(sys.argv[1], int(sys.argv[2])))
