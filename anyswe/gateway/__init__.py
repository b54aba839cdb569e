"""The model gateway: every agent's model calls go through it (tokens per task, trajectories, budgets).

``wire`` reads and writes the three protocols; ``scripted`` is the deterministic model for tests
and oracle runs; ``server`` is the HTTP gateway itself.
"""

from anyswe.gateway.grants import Budget, Grant, Limits
from anyswe.gateway.scripted import ScriptedModel
from anyswe.gateway.server import Gateway
from anyswe.gateway.wire import Conversation, Message, Protocol, Reply, ToolCall, Usage

__all__ = [
    "Budget",
    "Conversation",
    "Gateway",
    "Grant",
    "Limits",
    "Message",
    "Protocol",
    "Reply",
    "ScriptedModel",
    "ToolCall",
    "Usage",
]
