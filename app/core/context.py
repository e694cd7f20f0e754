"""What the code serving a request knows about it without being handed it: the request's id.

Set by the HTTP layer (:class:`app.logs.RequestId`) for the task that serves one HTTP request
or WebSocket, read by the log records of that task and by the pipeline, which records it on
the request's receipts.  Worker threads started with ``run_in_threadpool`` (or
``contextvars.copy_context``) see the value of the task that started them; elsewhere (ingest
threads) it is None.
"""

from __future__ import annotations

from contextvars import ContextVar

#: The id of the request being served (``X-Request-ID``), or None outside one.
REQUEST_ID: ContextVar[str | None] = ContextVar("zapverify_request_id", default=None)
