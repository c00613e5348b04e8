"""Chaos: one workload, a recorded history, faults on a schedule, one checker.

Layers, by dependency direction: :mod:`.history` (the JSONL record) and :mod:`.checker` (a pure
function over it) know nothing of Kafka; :mod:`.gateway_process`, :mod:`.workload` and :mod:`.collect`
run gateways and read their stores; :mod:`.nemesis` schedules faults; :mod:`.runner` ties one
scenario's repetitions together for ``fleet chaos run``. See ``docs/chaos.md``.
"""
