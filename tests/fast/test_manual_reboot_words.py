"""Attack 41a MEDIUM-4: a reboot whose power cycle gave up waits for a person, and `host status`
and `--wait` said only ``waiting for `metalflow host-rebooted H` (someone reboots H by hand)``:
not why (the BMC did not answer, rejected the credentials) nor the host's power, which only
`--json`'s details and the Event had. The waiting line now says both, from the reboot's details
(`seen_without_status`): the reason, and that the host is not off by this reboot's hand (a host
it left off waits in `manual-intervention-required`, whose words say "is OFF")."""

from __future__ import annotations

from metalflow.seen import seen_without_status

HOST = "host-005"
WHY = (
    "the BMC of host-005 is unreachable (BMCUnavailable: BMC host-005: cannot reach "
    "http://10.0.0.5 (ConnectError: All connection attempts failed))"
)
DETAILS = (
    f"**waiting-for-manual-reboot**: {WHY}; reboot {HOST} and send the signal `host_rebooted` "
    f"(`metalflow host-rebooted {HOST}`), or fix the BMC and `metalflow host retry {HOST}`"
)


def test_the_wait_for_a_person_says_why_and_the_hosts_power() -> None:
    seen = seen_without_status("waiting-for-manual-reboot", DETAILS, HOST)
    assert seen.waiting_for == (
        f"`metalflow host-rebooted {HOST}` (someone reboots {HOST} by hand), or fix the BMC and "
        f"`metalflow host retry {HOST}`: {WHY}; {HOST} is not off by this reboot's hand"
    ), seen.waiting_for
    assert "\n" not in seen.waiting_for  # one line


def test_without_a_retry_offered_or_details_it_says_what_it_knows() -> None:
    manual = DETAILS.removesuffix(f", or fix the BMC and `metalflow host retry {HOST}`")
    seen = seen_without_status("waiting-for-manual-reboot", manual, HOST)
    assert seen.waiting_for == (
        f"`metalflow host-rebooted {HOST}` (someone reboots {HOST} by hand): {WHY}; "
        f"{HOST} is not off by this reboot's hand"
    ), seen.waiting_for
    unread = seen_without_status("waiting-for-manual-reboot", None, HOST)
    assert unread.waiting_for == f"`metalflow host-rebooted {HOST}` (someone reboots {HOST} by hand)"


def test_secret_shaped_words_of_the_bmc_are_taken_out() -> None:
    leaky = DETAILS.replace("http://10.0.0.5", "http://admin:Zq9secret@10.0.0.5")
    seen = seen_without_status("waiting-for-manual-reboot", leaky, HOST)
    assert "Zq9secret" not in seen.waiting_for and "[redacted]" in seen.waiting_for, seen.waiting_for
