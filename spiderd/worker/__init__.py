"""The worker role: a Scrapyd-compatible HTTP API that runs batches of detail URLs as persistent jobs.

- :mod:`.config`: :class:`WorkerConfig`, the ``[worker]`` settings (checked at load, in :mod:`spiderd.config`);
- :mod:`.api`, :mod:`.validate`, :mod:`.jobsettings`: Scrapyd 1.6's endpoints, parameter checks, the Scrapy
  settings a job honours;
- :mod:`.pages`, :mod:`.joblog`: Scrapyd's web pages (``/``, ``/jobs``, ``/logs/``) and each job's log file;
- :mod:`.jobs`: jobs, one JSON file each, written atomically;
- :mod:`.runner`, :mod:`.execution`, :mod:`.pipeline`, :mod:`.run`, :mod:`.files`: running jobs (their URLs
  through the worker's queue and the node's page engine, :mod:`spiderd.engine`; items file; feed);
- :mod:`.service`: :class:`WorkerService` and :func:`build_worker`, for ``tap.build``.
"""

from spiderd.worker.config import WorkerConfig
from spiderd.worker.service import WorkerService, build_worker, worker_config

__all__ = ["WorkerConfig", "WorkerService", "build_worker", "worker_config"]
