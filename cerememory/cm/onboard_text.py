"""The words of `cm onboard`, the reference's own: the extraction prompt with its six example
rules, the guided-onboarding text and the advice for a playbook of a given size."""

from __future__ import annotations

from typing import Any

from .quality import CATEGORY_KEYWORDS

EXAMPLE_RULES = [  # the reference's six, in its shape {rule, category}
    {"rule": "Before implementing a fix, search the codebase to verify the issue still exists",
     "category": "debugging"},
    {"rule": "When claiming a task, first check its current status - another agent may have completed it",
     "category": "workflow"},
    {"rule": "When parsing JSON from external CLIs, handle both arrays and wrapper objects", "category": "integration"},
    {"rule": "Always run the full test suite before committing", "category": "testing"},
    {"rule": "Use centralized constant files instead of hardcoding magic strings", "category": "architecture"},
    {"rule": "AVOID: Mocking entire modules in tests - prefer mocking specific functions", "category": "testing"},
]
EXTRACTION_PROMPT = "\n".join([  # the reference's, word for word
    "# Session Analysis Instructions", "",
    "You are analyzing a coding session to extract reusable rules for the playbook.", "",
    "## What to Look For", "",
    "1. **Patterns that led to success**", "   - What approaches worked well?",
    "   - What debugging strategies helped?", "   - What architectural decisions paid off?", "",
    "2. **Patterns that caused problems**", "   - What mistakes were made?", "   - What approaches failed?",
    "   - What should be avoided?", "",
    "3. **Workflow insights**", "   - How was work prioritized?", "   - How were tasks coordinated?",
    "   - What communication patterns helped?", "",
    "4. **Tool-specific knowledge**", "   - CLI quirks or gotchas", "   - API format surprises",
    "   - Configuration patterns", "",
    "## Rule Formulation Guidelines", "",
    '- Write rules as **imperative statements** ("Always...", "Never...", "When X, do Y")',
    "- Be **specific** enough to be actionable", "- Include **context** about when the rule applies",
    '- For anti-patterns, prefix with "AVOID:" or "PITFALL:"', "",
    "## Categories to Use", "", *[f"- {c}" for c in CATEGORY_KEYWORDS], "",
    "## Example Rules", "", *[f'- [{e["category"]}] "{e["rule"]}"' for e in EXAMPLE_RULES], "",
    "## After Analysis", "",
    "**Recommended (batch add):** Create a JSON array and add all rules at once:", "",
    "```bash", "# Create rules.json with extracted rules:",
    '# [{"content": "Rule 1...", "category": "debugging"}, {"content": "Rule 2...", "category": "testing"}]', "",
    "cm playbook add --file rules.json --check", "```", "",
    "**Alternative (single add):** Add rules one at a time:", "", "```bash",
    'cm playbook add "Your rule content" --category "category" --check', "```", "",
    "The `--check` flag validates rules before adding (similarity, quality, category match)."])
_GUIDE = """## How This Works

Instead of using expensive LLM APIs, **you** (the coding agent) do the reflection work.
This is "free" since you're already being paid for via Claude Max/GPT Pro.

## Step-by-Step Process

### Step 1: Sample Sessions
```bash
cm onboard sample --json
```
This returns diverse sessions from your cass history to analyze.

### Step 2: Read a Session
```bash
cm onboard read <session-path>
```
This exports the session content for you to analyze.

### Step 3: Extract Rules
Read the session content and identify reusable patterns.
Use the extraction prompt (`cm onboard prompt`) for guidance.

### Step 4: Add Rules
```bash
cm playbook add "Your rule content" --category "category"
```

### Step 5: Repeat
Process 10-20 diverse sessions for a good initial playbook.

---

## Quick Commands

| Command | Purpose |
|---------|---------|
| `cm onboard status` | Check onboarding status |
| `cm onboard sample` | Get sessions to analyze |
| `cm onboard read <path>` | Read a session |
| `cm onboard prompt` | Get extraction instructions |
| `cm playbook add "..." --category "..."` | Add a rule |
| `cm playbook list` | View all rules |"""


def guided_text(status: dict[str, Any], ok: str, fail: str) -> str:
    """The reference's onboarding guide (markdown), with where onboarding stands."""
    cass = f"{ok} cass available" if status["cassAvailable"] else f"{fail} cass not available"
    return "\n".join(["# Agent-Native Onboarding Guide", "", "**Current Status:**", cass,
                      f"Playbook rules: {status['playbookRules']}", "", f"**{status['recommendation']}**", "",
                      "---", "", _GUIDE, "", "## Categories", "", *[f"- `{c}`" for c in CATEGORY_KEYWORDS], "",
                      "## Example Rules", "", *[f'- **{e["category"]}**: "{e["rule"]}"' for e in EXAMPLE_RULES]])


def recommendation(rules: int) -> str:
    """The reference's advice for a playbook of `rules` active rules, history being there (ours
    is always: the raw journal)."""
    if rules == 0:
        return "Your playbook is empty! Run `cm onboard guided` to start extracting rules"
    if rules < 10:
        return "Your playbook has few rules. Run `cm onboard guided` to add more"
    if rules < 50:
        return "Consider running `cm onboard sample` to find more patterns"
    return "Your playbook looks healthy. Use `cm context` for task-specific rules"
