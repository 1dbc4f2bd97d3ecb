"""A realistic GetServerConfigResponse, built from the aiserver.v1 facts, for rewrite tests.

Realistic means: many sections set (as Cursor's backend fills them), the agent URLs Cursor's own
backend hands out, `http2_config` set (or not), and fields a newer server adds that no schema here
knows (numbers above the facts' highest), some placed *between* known fields, so a rewrite that
re-encodes instead of keeping bytes would be caught.
"""

from __future__ import annotations

from byok.proto import aiserver_pb2 as spb
from byok.wire.protowire import encode_len, encode_varint_field

UNKNOWN_MIDDLE = encode_len(90, b"field from a newer server") + encode_varint_field(91, 300)
UNKNOWN_TAIL = encode_len(36, b"\x08\x01\x12\x04tail")
AGENT_URL = "https://agent.api5.cursor.sh"
AGENTN_URL = "https://agentn.api5.cursor.sh"


def server_config(*, http2_config: int | None = spb.HTTP2_CONFIG_FORCE_ALL_ENABLED,
                  agent_urls: bool = True) -> bytes:
    head = spb.GetServerConfigResponse(
        is_dev_do_not_use_for_secret_things_because_can_be_spoofed_by_users=False,
        indexing_config=spb.IndexingConfig(max_concurrent_uploads=8, absolute_max_number_files=250000,
                                           max_file_retries=3, sync_concurrency=4, incremental=True),
        client_tracing_config=spb.ClientTracingConfig(global_sample_rate=0.01, traces_sample_rate=0.001),
        chat_config=spb.ChatConfig(full_context_token_limit=30000, max_rule_length=100000, max_mcp_tools=40,
                                   summarization_message="Chat context summarized."),
        config_version="2025-11-03.7f3e1c2",
    ).SerializeToString()
    middle = b""
    if http2_config is not None:
        middle = spb.GetServerConfigResponse(http2_config=http2_config).SerializeToString()
    tail = spb.GetServerConfigResponse(
        model_migrations=[spb.ModelMigration(id="m-1", model_setting="composer", target_model="auto",
                                             previous_model="claude-3.5-sonnet")],
        agent_telemetry_config=spb.AgentTelemetryConfig(enabled=True),
        client_version_status=spb.ClientVersionStatus(current_client_version="2.0.77",
                                                      min_supported_client_version="1.6.0"),
        use_nlb_for_nal=True,
        cli_sandbox_default_enabled=True,
        model_picker_nudge="",
    )
    if agent_urls:
        tail.agent_url_config.agent_url = AGENT_URL
        tail.agent_url_config.agentn_url = AGENTN_URL
    return head + middle + UNKNOWN_MIDDLE + tail.SerializeToString() + UNKNOWN_TAIL
