"""The wire protocols the mock model speaks, one module each."""

from harnesses.mock_model.anthropic_messages import AnthropicMessages
from harnesses.mock_model.openai_chat import OpenAIChat
from harnesses.mock_model.openai_responses import OpenAIResponses
from harnesses.mock_model.server import WireProtocol

ALL_PROTOCOLS: tuple[WireProtocol, ...] = (OpenAIChat(), AnthropicMessages(), OpenAIResponses())
