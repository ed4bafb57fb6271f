from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

POLICY = """
channels:
  C1:
    approvers: [U2]
"""
deleted = []


@function_tool(needs_approval=True)
def delete_logs(path: str) -> str:
    """Delete log files under a path."""
    deleted.append(path)
    return f"deleted {path}"


def my_agent():
    # No OpenAI: the model is scripted. It asks for the tool, then answers.
    model = ScriptedModel(
        [
            [function_call("delete_logs", {"path": "/var/log/app"}, call_id="c1")],
            [assistant_message("Deleted the app logs.")],
        ]
    )
    return Agent(name="ops", instructions="You run servers.", model=model, tools=[delete_logs])


async def test_deleting_logs_needs_an_approver(bot_harness, slack_api):
    async with bot_harness(my_agent(), POLICY) as bot:
        card = await bot.start_and_wait("clean up the logs", user="U1", channel="C1")
        assert "delete_logs" in card.all_text() and deleted == []

        await bot.click(card, "approval_approve", user="U3")  # not an approver
        await bot.idle()
        assert "not among the approvers" in slack_api.ephemeral_to("U3")[-1]

        await bot.click(card, "approval_approve", user="U2")
        await bot.wait_for_status("finished")
    assert deleted == ["/var/log/app"]
    assert "Deleted the app logs." in [m.text for m in bot.run_thread()]
