"""Whether a failed attempt is retried: a job's retry rules, then its attempts left (AWS Batch's evaluateOnExit).

A job's `retry_rules` is a list of {"action": "RETRY" | "EXIT", "on_status_reason", "on_reason",
"on_exit_code"}, each condition a glob that is either exact or ends in `*` (a prefix). On a failed attempt the
first rule whose every given condition matches decides: EXIT fails the job at once, RETRY retries it while
attempts are left. No rule matching: retry while attempts are left (the rule without rules).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

RETRY, EXIT = "RETRY", "EXIT"
CONDITIONS = ("on_status_reason", "on_reason", "on_exit_code")
MAX_RULES = 5
MAX_PATTERN = 512


def glob_matches(pattern: str, text: str) -> bool:
    """AWS's globs: exact, or a prefix when the pattern ends in `*` (`*` alone matches anything)."""
    if pattern.endswith("*"):
        return text.startswith(pattern[:-1])
    return text == pattern


def rule_matches(rule: Mapping, *, status_reason: str, reason: str, exit_code: int | None) -> bool:
    values = {
        "on_status_reason": status_reason,
        "on_reason": reason,
        "on_exit_code": "" if exit_code is None else str(exit_code),
    }
    given = [name for name in CONDITIONS if rule.get(name) is not None]
    if not given:
        return True
    return all(glob_matches(rule[name], values[name]) for name in given)


def retries(
    *,
    rules: Sequence[Mapping] | None,
    failed_attempts: int,
    retry_attempts: int,
    status_reason: str,
    reason: str = "",
    exit_code: int | None = None,
) -> tuple[bool, str]:
    """(retry?, why) for a job whose `failed_attempts` (this one included) have failed."""
    left = retry_attempts - failed_attempts
    for index, rule in enumerate(rules or ()):
        if rule_matches(rule, status_reason=status_reason, reason=reason, exit_code=exit_code):
            if rule.get("action") == EXIT:
                return False, f"retry rule {index + 1} (EXIT) matched"
            break
    if left > 0:
        return True, f"retrying, {left} attempt(s) left"
    return False, f"failed after {failed_attempts} attempt(s)"


def validate_rules(rules: object) -> list[str]:
    """Problems with a list of retry rules, each naming its place (`[1].action`); empty when it is fine."""
    if not isinstance(rules, list):
        return ["must be a list of rules"]
    problems: list[str] = []
    if len(rules) > MAX_RULES:
        problems.append(f"at most {MAX_RULES} rules, got {len(rules)}")
    for index, rule in enumerate(rules):
        if not isinstance(rule, Mapping):
            problems.append(f"[{index}]: must be an object")
            continue
        unknown = sorted(set(rule) - {"action", *CONDITIONS})
        if unknown:
            problems.append(f"[{index}]: unknown field(s) {', '.join(unknown)}")
        if rule.get("action") not in (RETRY, EXIT):
            problems.append(f"[{index}].action: must be RETRY or EXIT")
        for name in CONDITIONS:
            value = rule.get(name)
            if value is None:
                continue
            if not isinstance(value, str) or not value or len(value) > MAX_PATTERN:
                problems.append(f"[{index}].{name}: must be text of 1 to {MAX_PATTERN} characters")
            elif "*" in value[:-1]:
                problems.append(f"[{index}].{name}: a * may only end the pattern")
    return problems
