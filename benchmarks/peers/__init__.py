"""The systems bench_peers.py measures side by side, one small adapter module each.

``base`` says what an entry is (a :class:`~peers.base.System`, its
:class:`~peers.base.Enqueuer` and :class:`~peers.base.Drainer` entries) and holds the
checks of a drain; ``monitor`` is lifecycles' monitor, ``procrastinate_queue`` and
``pgqueuer_queue`` the peers (installed by the ``bench`` extra, imported only when used).
"""
