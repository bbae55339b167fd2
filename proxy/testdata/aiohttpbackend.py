"""A lenient WebSocket backend: aiohttp (Debian python3-aiohttp 3.8), which
answers permessage-deflate and, with max_msg_size=0, assembles messages of
any size. It prints its port, then one line per message it assembled
("message <type> <size>") and "closed" when a connection ends, flushing each
line, so a test sees exactly what a lenient receiver made of the stream."""
import asyncio
import sys

from aiohttp import web, WSMsgType


async def handler(request):
    ws = web.WebSocketResponse(max_msg_size=0, compress=True, autoping=True)
    await ws.prepare(request)
    try:
        async for msg in ws:
            if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                print("message", msg.type.name, len(msg.data), flush=True)
            elif msg.type == WSMsgType.ERROR:
                break
    finally:
        print("closed", flush=True)
    return ws


async def main():
    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print("port", site._server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()


asyncio.run(main())
