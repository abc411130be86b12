"""The sync `grpc.server` with a thread pool, as an alternative to grpc.aio (INR_GRPC_SERVER=sync; issue 27).

The same servicer (service/api/grpc/servicer.py) runs on the event loop: a pool thread takes the call from grpc's
own polling thread, hands the servicer's coroutine to the loop (`run_coroutine_threadsafe`, the dataplane and its
batching live there) and waits for its answer. `LoopContext` is the part of grpc.aio's ServicerContext that the
servicer uses, over the sync call's context: an abort raised on the loop is re-raised as the sync abort in the
pool thread. A call without a deadline gets None from `time_remaining`, as on grpc.aio.
"""
from __future__ import annotations

import asyncio
import queue
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from .servicer import SERVICE, UNARY, InferenceService, reader

NO_DEADLINE = 1e8  # seconds: the sync context's "infinite" deadline is the far future


class Aborted(grpc.aio.AbortError):
    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(details)
        self.code, self.details = code, details


class LoopContext:
    def __init__(self, context: grpc.ServicerContext):
        self.context = context

    def time_remaining(self) -> float | None:
        left = self.context.time_remaining()
        return None if left is None or left > NO_DEADLINE else left

    def invocation_metadata(self):
        return self.context.invocation_metadata()

    async def abort(self, code: grpc.StatusCode, details: str):
        raise Aborted(code, details)


def bridged(service: InferenceService, name: str, loop: asyncio.AbstractEventLoop):
    method = getattr(service, name)

    def call(request, context):
        try:
            return asyncio.run_coroutine_threadsafe(method(request, LoopContext(context)), loop).result()
        except Aborted as e:
            context.abort(e.code, e.details)
    return call


def bridged_stream(service: InferenceService, loop: asyncio.AbstractEventLoop):
    """ModelStreamInfer: the request iterator is read in the pool thread and fed to the servicer's async
    generator on the loop; its answers come back in order."""
    def call(requests, context):
        feed: asyncio.Queue = asyncio.Queue()
        done = object()

        async def source():
            while (item := await feed.get()) is not done:
                yield item

        answers: queue.Queue = queue.Queue()

        async def pump():
            try:
                async for answer in service.ModelStreamInfer(source(), LoopContext(context)):
                    answers.put(answer)
            except Exception as e:  # noqa: BLE001 - handed to the pool thread
                answers.put(e)
            answers.put(done)

        task = asyncio.run_coroutine_threadsafe(pump(), loop)

        def reader_thread():
            for r in requests:
                loop.call_soon_threadsafe(feed.put_nowait, r)
            loop.call_soon_threadsafe(feed.put_nowait, done)
        context.add_callback(lambda: task.cancel())
        ThreadPoolExecutor(1).submit(reader_thread)
        while (item := answers.get()) is not done:
            if isinstance(item, Aborted):
                context.abort(item.code, item.details)
            if isinstance(item, Exception):
                raise item
            yield item
    return call


def sync_server(service: InferenceService, options: list, threads: int):
    loop = asyncio.get_running_loop()
    server = grpc.server(ThreadPoolExecutor(max_workers=threads), options=options)
    methods = {name: grpc.unary_unary_rpc_method_handler(bridged(service, name, loop), request_deserializer=reader(cls),
                                                         response_serializer=lambda m: m.SerializeToString())
               for name, cls in UNARY.items()}
    from tritonclient.grpc import service_pb2 as pb
    methods["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(
        bridged_stream(service, loop), request_deserializer=reader(pb.ModelInferRequest),
        response_serializer=lambda m: m.SerializeToString())
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, methods),))
    checks = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    return server, checks
