"""The team file: precedence of users, groups and defaults; models, own keys, budgets; clear errors."""

import asyncio

import pytest

from byok.providers.config import ConfigFileError, ModelRoute
from byok.wire.errors import AccessDenied, BudgetExceeded
from byok.agent.team import Team, TeamFile, month_start_ms, next_month_start, parse_team

ROUTE = ModelRoute(public_id="abcd1234", provider="anthropic", kind="anthropic", base_url="https://x",
                   model_id="claude-x", display_name="Claude X", api_key="sk-team")

TEAM = """
[defaults]
models = ["*"]
monthly_tokens = 1000

[groups.research]
members = ["alice", "carol"]
models = ["claude-*"]
monthly_usd = 50

[groups.interns]
members = ["carol"]
models = ["nothing"]
monthly_tokens = 10

[users.alice]
monthly_tokens = 5000
keys.anthropic = { api_key_env = "ALICE_KEY" }
"""


def test_the_most_specific_setting_wins():
    team = parse_team(TEAM)
    alice = team.policy("alice")
    assert (alice.models, alice.monthly_tokens, alice.monthly_usd) == (("claude-*",), 5000, 50.0)
    assert alice.source == "[defaults] + [groups.research] + [users.alice]"
    carol = team.policy("carol")  # the first group (file order) that sets a field wins; a later one fills gaps
    assert (carol.models, carol.monthly_tokens, carol.monthly_usd) == (("claude-*",), 10, 50.0)
    stranger = team.policy("zed")
    assert (stranger.models, stranger.monthly_tokens, stranger.monthly_usd) == (("*",), 1000, None)


def test_models_and_own_keys():
    team = parse_team(TEAM)
    alice = team.policy("alice")
    assert alice.allows(ROUTE)
    own = alice.route_for(ROUTE)
    assert own.api_key is None and own.api_key_env == "ALICE_KEY"
    inline = parse_team('[users.u]\nkeys.anthropic = { api_key = "sk-u-SECRET" }').policy("u")
    assert inline.route_for(ROUTE).api_key == "sk-u-SECRET" and "SECRET" not in repr(inline)
    assert team.policy("zed").route_for(ROUTE).api_key == "sk-team"
    assert not parse_team('[defaults]\nmodels = ["gpt-*"]').policy("x").allows(ROUTE)
    assert parse_team('[defaults]\nmodels = ["anthropic/claude-x"]').policy("x").allows(ROUTE)
    assert parse_team('[defaults]\nmodels = ["abcd1234"]').policy("x").allows(ROUTE)


@pytest.mark.parametrize("text, needle", [
    ("[nope]\n", "unknown table"),
    ("[defaults]\nmodels = 'x'\n", "models must be a list"),
    ("[defaults]\nmonthly_tokens = -1\n", "monthly_tokens"),
    ("[defaults]\nmonthly_usd = 'ten'\n", "monthly_usd"),
    ("[groups.g]\nmodels = ['*']\n", "needs members"),
    ("[users.u]\nkeys.p = { api_key_env = 'not a name' }\n", "environment variable name"),
    ("[users.u]\ncolour = 'blue'\n", "unknown key 'colour'"),
    ("[defaults\n", "not valid TOML"),
])
def test_errors_name_the_file_and_the_table(text, needle):
    with pytest.raises(ConfigFileError) as e:
        parse_team(text, "/etc/byok/team.toml")
    assert needle in str(e.value) and "/etc/byok/team.toml" in str(e.value)


class UsageStore:
    def __init__(self, usage):
        self.usage = usage

    async def usage_since(self, user, since_ms):
        return self.usage


def test_budget_counts_prompt_and_output_and_names_the_reset_day(tmp_path):
    path = tmp_path / "team.toml"
    path.write_text('[defaults]\nmonthly_tokens = 1000\n')
    team = Team(TeamFile(path))
    now = 1_767_312_000_000  # 2026-01-02
    under = UsageStore({("m", "openai_chat"): {"input": 900, "output": 99, "cache_read": 500, "cache_write": 0}})
    asyncio.run(team.check_budget(under, "alice", lambda: now))  # OpenAI counts cached tokens inside input
    over = UsageStore({("m", "anthropic"): {"input": 400, "output": 99, "cache_read": 500, "cache_write": 1}})
    with pytest.raises(BudgetExceeded, match=r"alice has used 1,000 of 1,000 tokens .* resets on 2026-02-01"):
        asyncio.run(team.check_budget(over, "alice", lambda: now))
    assert month_start_ms(now) == 1_767_225_600_000 and next_month_start(1_798_761_600_000 - 1) == "2027-01-01"


def test_without_a_team_file_everything_is_allowed_and_with_one_a_user_is_required(tmp_path):
    assert Team().route_for(None, ROUTE) is ROUTE
    asyncio.run(Team().check_budget(UsageStore({}), None, lambda: 0))
    path = tmp_path / "team.toml"
    path.write_text("")
    with pytest.raises(AccessDenied, match="proxyauth"):
        Team(TeamFile(path)).route_for(None, ROUTE)


def test_a_bad_edit_keeps_the_last_good_team(tmp_path):
    path = tmp_path / "team.toml"
    path.write_text('[defaults]\nmodels = ["claude-*"]\n')
    file = TeamFile(path)
    assert file.policy("x").models == ("claude-*",)
    path.write_text('[defaults]\nmodels = 3\n')
    assert file.policy("x").models == ("claude-*",) and "models must be a list" in str(file.last_error)


def test_a_dollar_budget_uses_the_models_prices(tmp_path):
    from decimal import Decimal

    from byok.wire.errors import ConfigError
    from byok.providers.pricing import Prices

    path = tmp_path / "team.toml"
    path.write_text('[defaults]\nmonthly_usd = 4.5\n')
    prices = Prices(input=Decimal(3), output=Decimal(15))
    team = Team(TeamFile(path), prices_of=lambda public_id: prices if public_id == "abcd1234" else None)
    used = {("abcd1234", "anthropic"): {"input": 1_000_000, "output": 99_000, "cache_read": 0, "cache_write": 0}}
    asyncio.run(team.check_budget(UsageStore(used), "alice", lambda: 0))  # $3 + $1.485
    used[("abcd1234", "anthropic")]["output"] = 100_000  # $4.50: used up
    with pytest.raises(BudgetExceeded, match=r"alice has used \$4.50 of \$4.50 this month"):
        asyncio.run(team.check_budget(UsageStore(used), "alice", lambda: 0))
    with pytest.raises(ConfigError, match="has no prices"):
        team.route_for("alice", ROUTE)  # ROUTE has no prices: the dollar budget could not be kept
    import dataclasses
    assert team.route_for("alice", dataclasses.replace(ROUTE, prices=prices)).model_id == "claude-x"
