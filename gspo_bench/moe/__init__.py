"""MoE routing: record, replay (Routing Replay) and expert-activation drift on transformers MoE blocks."""

from gspo_bench.moe.capture import RoutingCapture
from gspo_bench.moe.drift import rerouted_positions, routing_drift
from gspo_bench.moe.routers import Router, find_routers

__all__ = ["Router", "RoutingCapture", "find_routers", "rerouted_positions", "routing_drift"]
