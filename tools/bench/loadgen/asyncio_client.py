#!/usr/bin/env python3
"""A Python asyncio streaming client, the baseline for the load generator's
chunks per core: the shape of vLLM's benchmark client (one coroutine per
request, SSE lines parsed with json.loads, a timestamp per chunk) on the
standard library only (asyncio streams, raw HTTP/1.1), since aiohttp is not
installed here. It reports chunks per second of its own CPU time.

    tools/bench/loadgen/asyncio_client.py PORT [requests] [concurrency] [output-len]
"""
import asyncio
import json
import resource
import sys
import time


async def one(port, out_len, sem, stats):
    async with sem:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = json.dumps({"model": "llmsim", "prompt": "a " * 16, "max_tokens": out_len,
                           "stream": True, "ignore_eos": True}).encode()
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Accept: text/event-stream\r\nConnection: close\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        arrivals = []
        while True:
            line = await reader.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                data = line[6:].strip()
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("choices"):
                    arrivals.append(time.perf_counter_ns())
        writer.close()
        stats["chunks"] += len(arrivals)


async def main():
    port = int(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    c = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    out_len = int(sys.argv[4]) if len(sys.argv) > 4 else 256
    sem = asyncio.Semaphore(c)
    stats = {"chunks": 0}
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    await asyncio.gather(*(one(port, out_len, sem, stats) for _ in range(n)))
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(f"python asyncio: {stats['chunks']} chunks in {wall:.2f} s: {stats['chunks']/wall:,.0f} chunks/s, "
          f"{cpu/wall:.2f} cores, {stats['chunks']/cpu:,.0f} chunks/s per client core")


asyncio.run(main())
