"""A deterministic synthetic help center for a fictional subscription product.

The corpus is built so that every retrieval failure mode the funnel cares about has
labels known by construction:

* one policy document per (topic, plan), near-duplicates that differ mainly in the
  plan word and one number, so a plan qualifier in the query decides the answer;
* error-code documents (``ERR-4029``) that only exact token matching finds;
* API documents whose dotted or snake_case identifiers occur in exactly one place;
* long multi-section guides, so one source yields many chunks and the per-source
  cap has something to do;
* per-topic synonyms that appear in no document, so the lexical leg cannot match
  a paraphrase and only a dense leg (or a rewrite) can.

Run ``python -m pgfunnel.eval.synthetic [--out DIR]`` to regenerate the shipped
``helpcenter.jsonl`` and ``helpcenter_queries.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

PLANS: tuple[str, ...] = ("annual", "monthly", "enterprise", "trial")
PROTECTED_QUALIFIERS: tuple[str, ...] = ("annual", "monthly", "enterprise", "trial")

# Plan order from most to least generous: drawn numbers are sorted and handed out in
# this order so that an enterprise allowance is never smaller than a trial one.
_GENEROSITY: tuple[str, ...] = ("enterprise", "annual", "monthly", "trial")

# How a plan word can leak into a document under an English stemmer ("monthly" and
# "month" share a stem), used to keep near-duplicates separable by plan alone.
_PLAN_STEMS: dict[str, str] = {
    "annual": "annual",
    "monthly": "month",
    "enterprise": "enterpris",
    "trial": "trial",
}

CORPUS_FILE = "helpcenter.jsonl"
QUERIES_FILE = "helpcenter_queries.jsonl"
DEFAULT_SEED = 7


class TopicTerms(NamedTuple):
    """The word a topic's documents use, and query-only synonyms they never use."""

    word: str
    synonyms: tuple[str, ...]


@dataclass(frozen=True)
class _TopicText:
    terms: TopicTerms
    # a phrase that occurs in this topic's plan documents and in no other document,
    # so exact and two-part queries have an unambiguous lexical target
    aspect: str
    title: str
    body: str
    numbers: range
    ask: str
    paraphrases: tuple[str, ...]


# Templates take {plan}, {Plan}, {a_plan} and {n}.
_TOPIC_TEXT: dict[str, _TopicText] = {
    "refunds": _TopicText(
        TopicTerms("refund", ("reimbursement", "money")),
        aspect="refund window",
        title="Refunds on {plan} plans",
        body=(
            "Owners of {a_plan} plan can ask for a refund of the most recent charge as long "
            "as the request arrives inside the refund window. For {plan} plans the refund "
            "window is {n} days, counted from the day the charge was captured rather than "
            "the day the invoice was emailed.\n\n"
            "## What cannot be refunded\n\n"
            "Usage-based add-ons, overage fees and any charge older than the refund window "
            "are not returned. A partial period is prorated only when the owner cancels on "
            "the same day the charge happened. Approved refunds go back to the original "
            "card and normally show up on the statement of that card within five to ten "
            "business days, depending on the issuing bank."
        ),
        numbers=range(7, 61),
        ask="how do refunds work?",
        paraphrases=(
            "how do I get my money back on {a_plan} subscription",
            "reimbursement rules for {plan} customers",
        ),
    ),
    "data-export": _TopicText(
        TopicTerms("export", ("takeout", "dump")),
        aspect="export archive",
        title="Exporting workspace data on {plan} plans",
        body=(
            "Workspace owners on {a_plan} plan can export every project, comment and "
            "attachment as one export archive containing JSON and CSV files. Large "
            "workspaces are processed in the background, and we send an email with a link "
            "once the archive is ready. On {plan} plans that link stays valid for {n} "
            "hours; after that the export archive is deleted and a new one has to be "
            "requested.\n\n"
            "## Running an export\n\n"
            "Open Settings, choose Data and press Start export. Only one export job can run "
            "per workspace at a time, and a second request made while one is queued is "
            "rejected instead of being lined up behind it. Attachments keep their original "
            "file names and formats inside the archive."
        ),
        numbers=range(6, 97, 6),
        ask="how do I export my data?",
        paraphrases=(
            "takeout of all my workspace data on the {plan} plan",
            "full dump of my account on {a_plan} subscription",
        ),
    ),
    "invoices": _TopicText(
        TopicTerms("invoice", ("bill", "receipt")),
        aspect="payment terms",
        title="Invoices on {plan} plans",
        body=(
            "Every charge on {a_plan} plan produces an invoice that lists the plan, the "
            "number of seats, any add-ons and the tax applied. Invoices for {plan} plans "
            "are issued on the renewal date and carry payment terms of net {n} days, after "
            "which the account is flagged as overdue and the owner is reminded by email.\n\n"
            "## Changing invoice details\n\n"
            "The company name, postal address and purchase order number printed on an "
            "invoice can be edited under Settings, Payments. Edits apply to future invoices "
            "only; to correct one that was already issued, ask support to void it and issue "
            "a corrected copy. PDF copies of past invoices remain available for seven years."
        ),
        numbers=range(10, 91, 5),
        ask="how are invoices issued?",
        paraphrases=(
            "where do I find the bill for my {plan} subscription",
            "need a receipt for {a_plan} plan charge",
        ),
    ),
    "rate-limits": _TopicText(
        TopicTerms("rate limit", ("throttling", "slowdown")),
        aspect="requests per minute",
        title="API rate limits on {plan} plans",
        body=(
            "Calls to the public API are counted per API key in a sliding sixty-second "
            "window. On {plan} plans the rate limit is {n} requests per minute, shared by "
            "every integration that uses the same key. Once the limit is reached the API "
            "answers with status 429 and a Retry-After header saying how many seconds to "
            "wait.\n\n"
            "## Staying under the limit\n\n"
            "Batch endpoints accept up to one hundred records per call and count as a "
            "single request. Clients should back off exponentially after a 429 instead of "
            "retrying at once, because rejected calls still count toward the window. "
            "{Plan} workspaces that need more headroom for a one-off migration can ask "
            "support for a temporary raise."
        ),
        numbers=range(60, 1201, 30),
        ask="what are the API rate limits?",
        paraphrases=(
            "api throttling on {a_plan} plan",
            "how much traffic before the slowdown kicks in on {plan}",
        ),
    ),
    "webhooks": _TopicText(
        TopicTerms("webhook", ("callback", "postback")),
        aspect="delivery attempts",
        title="Webhooks on {plan} plans",
        body=(
            "A webhook sends an HTTPS POST to your endpoint whenever something changes in "
            "the workspace, such as a new invoice or a seat being assigned. The endpoint "
            "must answer with a 2xx status within ten seconds. On {plan} plans a failed "
            "delivery is retried with growing delays, up to {n} delivery attempts in total, "
            "before the event is marked as failed.\n\n"
            "## Verifying and replaying events\n\n"
            "Each request carries a signature header computed with the endpoint's signing "
            "key; reject any request whose signature does not match. Failed events stay "
            "listed on the Webhooks page for thirty days and can be replayed by hand once "
            "the endpoint is healthy again."
        ),
        numbers=range(3, 25),
        ask="how do webhook retries work?",
        paraphrases=(
            "callback retries on {a_plan} plan",
            "how many times is a postback retried for {plan} accounts",
        ),
    ),
    "seats": _TopicText(
        TopicTerms("seat", ("licence", "headcount")),
        aspect="seat limit",
        title="Seats on {plan} plans",
        body=(
            "A seat is one named member who can sign in to the workspace. {Plan} plans "
            "include up to {n} seats; the seat limit counts active members and pending "
            "invitations, but not guests who only open view-only links.\n\n"
            "## Adding and freeing seats\n\n"
            "Admins invite members from the People page. When the seat limit is reached, "
            "new invitations wait as pending until someone is removed or more seats are "
            "bought. Removing a member frees the seat at once, and the projects that person "
            "owned pass to the admin who removed them. Seats added partway through a period "
            "are prorated on the next invoice, and seats removed partway through are "
            "credited at the next renewal rather than immediately."
        ),
        numbers=range(3, 301),
        ask="how do seats work?",
        paraphrases=(
            "how many licences does {a_plan} plan include",
            "headcount allowed on {plan} subscription",
        ),
    ),
    "sso": _TopicText(
        TopicTerms("single sign-on", ("okta", "federated")),
        aspect="SSO session",
        title="Single sign-on on {plan} plans",
        body=(
            "Single sign-on lets members sign in through your company's SAML 2.0 or "
            "OpenID Connect provider instead of a password. On {plan} plans an SSO session "
            "lasts {n} hours, after which members are sent back to the provider to "
            "authenticate again.\n\n"
            "## Setting it up\n\n"
            "An admin uploads the provider's metadata file on the Security page, maps the "
            "email attribute, and tests the connection with their own account before "
            "enforcing it. Once SSO is enforced, password sign-in is switched off for "
            "everyone except one designated break-glass admin. Members removed in the "
            "provider lose access at their next SSO session check."
        ),
        numbers=range(4, 97, 4),
        ask="how does single sign-on work?",
        paraphrases=(
            "okta login on {a_plan} plan",
            "how long do federated logins last on {plan}",
        ),
    ),
    "storage": _TopicText(
        TopicTerms("storage", ("disk space", "capacity")),
        aspect="storage quota",
        title="Storage on {plan} plans",
        body=(
            "Files, attachments and their earlier versions all count toward the workspace "
            "storage quota. {Plan} plans come with a storage quota of {n} GB, pooled across "
            "all members rather than split per person. The usage bar on the Settings page "
            "updates within a few minutes of an upload.\n\n"
            "## When the quota is full\n\n"
            "At 90 percent of the quota, admins receive an email warning. Once the quota is "
            "reached, uploads are refused, but everything already stored stays readable "
            "and editable. Emptying the trash, deleting old file versions or buying an "
            "extra storage pack brings the workspace back under the limit."
        ),
        numbers=range(5, 1001, 5),
        ask="how much storage do we get?",
        paraphrases=(
            "disk space on {a_plan} plan",
            "how much capacity do {plan} workspaces get",
        ),
    ),
    "api-keys": _TopicText(
        TopicTerms("API key", ("token", "secret")),
        aspect="key expiry",
        title="API keys on {plan} plans",
        body=(
            "API keys authenticate server-to-server calls to the public API. Each key "
            "belongs to the member who created it and inherits that member's permissions. "
            "On {plan} plans a key expires {n} days after it is created, and the key expiry "
            "date is shown next to the key on the Developer page.\n\n"
            "## Rotating a key\n\n"
            "Create the new key first, deploy it to your services, and only then revoke "
            "the old one, so that no request fails in between. A revoked key stops working "
            "within a minute. Keys are shown in full only once, when they are created; "
            "afterwards only the last four characters are displayed."
        ),
        numbers=range(30, 366, 5),
        ask="do API keys expire?",
        paraphrases=(
            "when does an access token stop working on {plan} plans",
            "secret rotation on {a_plan} subscription",
        ),
    ),
    "backups": _TopicText(
        TopicTerms("backup", ("snapshot", "rollback")),
        aspect="backup retention",
        title="Backups on {plan} plans",
        body=(
            "We take an automatic backup of every workspace each night and keep a copy in "
            "a second region. On {plan} plans the backup retention is {n} days, so any "
            "nightly backup from that period can be restored.\n\n"
            "## Restoring from a backup\n\n"
            "A workspace owner requests a restore from the Data page. You can restore the "
            "whole workspace or a single project; a full restore replaces the current "
            "content, so export anything recent first. Restores usually finish within an "
            "hour. Backups are encrypted at rest and are never used for anything other "
            "than recovery, and they cannot be downloaded directly."
        ),
        numbers=range(3, 91),
        ask="how are backups kept?",
        paraphrases=(
            "how far back does a snapshot go on {a_plan} plan",
            "rollback options for {plan} workspaces",
        ),
    ),
    "downtime-credits": _TopicText(
        TopicTerms("downtime credit", ("outage", "compensation")),
        aspect="downtime credit",
        title="Downtime credits on {plan} plans",
        body=(
            "If the service is unavailable for longer than our uptime commitment allows, "
            "affected workspaces can claim a downtime credit. For {plan} plans each "
            "qualifying hour earns a downtime credit of {n} percent of the fee for the "
            "affected period, up to the full fee.\n\n"
            "## Claiming a credit\n\n"
            "Claims must reach support within thirty days of the incident and name the "
            "affected workspace and the time range. Maintenance announced at least 48 "
            "hours ahead does not count as downtime. Approved credits are deducted from "
            "the next invoice and are never paid out in cash."
        ),
        numbers=range(5, 51, 5),
        ask="how do downtime credits work?",
        paraphrases=(
            "compensation for an outage on {a_plan} plan",
            "outage compensation for {plan} customers",
        ),
    ),
    "cancellations": _TopicText(
        TopicTerms("cancellation", ("terminate", "quit")),
        aspect="notice period",
        title="Cancellation on {plan} plans",
        body=(
            "Owners can cancel a subscription at any time from Settings, Plan. On {plan} "
            "plans cancellation requires a notice period of {n} days: the workspace stays "
            "fully usable until the notice period ends and is then switched to "
            "read-only.\n\n"
            "## After cancellation\n\n"
            "Read-only workspaces keep their content, so members can still open and export "
            "projects, but nothing new can be created. Cancelling does not delete data by "
            "itself; deletion follows the rules for deleted data. If you change your mind "
            "before the notice period ends, reactivate from the same page and nothing is "
            "lost."
        ),
        numbers=range(7, 91),
        ask="how do I cancel?",
        paraphrases=(
            "how to terminate {a_plan} subscription",
            "I want to quit the {plan} plan, how much warning do I give",
        ),
    ),
    "tax": _TopicText(
        TopicTerms("tax", ("levy", "duty")),
        aspect="exemption certificate",
        title="Sales tax and VAT on {plan} plans",
        body=(
            "We charge sales tax or VAT based on the address on the account and show it as "
            "a separate line on every invoice. Organisations that are tax-exempt can upload "
            "an exemption certificate; on {plan} plans our team reviews each exemption "
            "certificate within {n} business days.\n\n"
            "## Tax IDs and the reverse charge\n\n"
            "Businesses in the EU and UK can add a VAT number under Settings, Payments. "
            "When the number validates, the reverse charge applies and no VAT is added to "
            "future invoices. Tax charged before the certificate or the number was "
            "accepted is not reversed retroactively."
        ),
        numbers=range(2, 31),
        ask="how is tax handled?",
        paraphrases=(
            "duty exemption on {a_plan} plan",
            "levy exemption for {plan} customers",
        ),
    ),
    "audit-logs": _TopicText(
        TopicTerms("audit log", ("trail", "forensics")),
        aspect="audit log entries",
        title="Audit logs on {plan} plans",
        body=(
            "The audit log records sign-ins, permission changes, exports, API key activity "
            "and deletions, each with the member, the IP address and the time. On {plan} "
            "plans audit log entries are kept for {n} days and then removed for good.\n\n"
            "## Reading and exporting the log\n\n"
            "Admins can filter the audit log by member, action or date on the Security "
            "page. Entries can be downloaded as CSV, or streamed to your own log platform "
            "through a webhook so that they outlive the retention period. Nobody can edit "
            "or delete audit log entries, owners included, which is what makes them "
            "useful as evidence."
        ),
        numbers=range(30, 731, 15),
        ask="how long are audit logs kept?",
        paraphrases=(
            "how long is the activity trail kept on {plan}",
            "forensics records on {a_plan} plan",
        ),
    ),
    "failed-payments": _TopicText(
        TopicTerms("failed payment", ("declined", "bounced")),
        aspect="grace period",
        title="Failed payments on {plan} plans",
        body=(
            "When a scheduled charge does not go through, we retry the card automatically "
            "and email the workspace owner after each failed payment. On {plan} plans there "
            "is a grace period of {n} days during which the workspace keeps working "
            "normally while the retries continue.\n\n"
            "## Updating the payment method\n\n"
            "Owners can replace the card or switch to bank transfer under Settings, "
            "Payments; the outstanding amount is charged again within an hour of the "
            "change. If the grace period ends without a successful payment, the workspace "
            "becomes read-only until the balance is settled."
        ),
        numbers=range(3, 31),
        ask="what happens when a payment fails?",
        paraphrases=(
            "card declined on {a_plan} subscription",
            "bounced charge on the {plan} plan",
        ),
    ),
    "data-retention": _TopicText(
        TopicTerms("deletion", ("purge", "erase")),
        aspect="recovery period",
        title="Deleted data on {plan} plans",
        body=(
            "Deleting a project or a whole workspace does not remove it at once. On {plan} "
            "plans deleted items remain in a recovery period of {n} days, during which an "
            "owner can restore them from the trash.\n\n"
            "## Permanent deletion\n\n"
            "When the recovery period ends, items are deleted permanently from live "
            "systems and disappear from backups as those backups age out. Owners who need "
            "data gone sooner, for example to honour a GDPR request, can ask support for "
            "immediate permanent deletion; it cannot be undone and is confirmed in "
            "writing. Deletion of a single file never affects other files in the project."
        ),
        numbers=range(7, 91),
        ask="what happens to deleted projects?",
        paraphrases=(
            "purge deleted projects on the {plan} plan",
            "can I get back erased items on {a_plan} plan",
        ),
    ),
    "support": _TopicText(
        TopicTerms("support", ("helpdesk", "assistance")),
        aspect="first response",
        title="Support response times on {plan} plans",
        body=(
            "Support is reachable by email and from the chat button in the app. On {plan} "
            "plans we aim to send a first response within {n} hours, counted around the "
            "clock for urgent tickets and in business hours for everything else.\n\n"
            "## Getting a faster answer\n\n"
            "Mark a ticket urgent only when work is blocked for several members, and "
            "include the workspace address, the steps you took and any error code shown on "
            "screen. Tickets opened from the app attach the browser version automatically. "
            "A first response is a reply written by a person, not the automatic "
            "acknowledgement that confirms the ticket was received."
        ),
        numbers=range(1, 73),
        ask="how quickly does support reply?",
        paraphrases=(
            "helpdesk reply time for {plan} customers",
            "how fast is assistance on {a_plan} plan",
        ),
    ),
    "two-factor": _TopicText(
        TopicTerms("two-factor authentication", ("2fa", "mfa")),
        aspect="recovery codes",
        title="Two-factor authentication on {plan} plans",
        body=(
            "Two-factor authentication asks for a one-time code from an authenticator app "
            "after the password. Members on {plan} plans who turn it on receive {n} "
            "recovery codes, each usable once, for the day their phone goes missing.\n\n"
            "## Requiring it for everyone\n\n"
            "Admins can make two-factor authentication mandatory from the Security page. "
            "Members who have not enrolled are asked to do so at their next sign-in and "
            "cannot open the workspace until they finish. Keep recovery codes somewhere "
            "other than the phone; support cannot bypass the second factor without a "
            "signed ownership check."
        ),
        numbers=range(5, 31),
        ask="how does two-factor authentication work?",
        paraphrases=(
            "how many mfa fallback codes on {plan} plans",
            "2fa setup for {a_plan} plan",
        ),
    ),
    "discounts": _TopicText(
        TopicTerms("discount", ("coupon", "promo")),
        aspect="nonprofit discount",
        title="Discounts on {plan} plans",
        body=(
            "Registered nonprofits and accredited schools can apply for a discount on the "
            "list price. On {plan} plans the nonprofit discount is {n} percent, applied to "
            "seats and storage packs but not to usage-based add-ons.\n\n"
            "## Applying and renewing\n\n"
            "Send proof of status from the Plan page; approval normally takes a few "
            "business days and the discount starts with the next invoice. Discounts do not "
            "stack, so the larger one wins when two would apply. Each approval lasts two "
            "years, after which new proof is needed to keep the reduced price."
        ),
        numbers=range(5, 61, 5),
        ask="do you offer nonprofit discounts?",
        paraphrases=(
            "coupon for the {plan} plan",
            "promo pricing on {a_plan} subscription",
        ),
    ),
    "sandbox": _TopicText(
        TopicTerms("sandbox", ("staging", "playground")),
        aspect="sandbox workspaces",
        title="Sandboxes on {plan} plans",
        body=(
            "A sandbox is a separate copy of the workspace for testing integrations and "
            "automations without touching real data. {Plan} plans include {n} sandbox "
            "workspaces, each with its own API keys and webhook endpoints.\n\n"
            "## Refreshing a sandbox\n\n"
            "An admin can refresh a sandbox from production at any time. The refresh "
            "copies structure and settings but not file contents, and it wipes whatever was "
            "in the sandbox before. Calls made against a sandbox do not count toward the "
            "production rate limit, and nothing in a sandbox ever sends email to real "
            "members."
        ),
        numbers=range(1, 13),
        ask="what is a sandbox?",
        paraphrases=(
            "staging environment on {a_plan} plan",
            "playground workspaces for {plan}",
        ),
    ),
}

TOPICS: dict[str, TopicTerms] = {key: t.terms for key, t in _TOPIC_TEXT.items()}


class _ErrorText(NamedTuple):
    topic: str
    headline: str
    text: str  # takes {code}, spelled ERR-nnnn


_ERRORS: tuple[_ErrorText, ...] = (
    _ErrorText(
        "refunds",
        "refund request not eligible",
        "{code} appears when a refund is requested for a charge that is older than the "
        "plan allows or that was already refunded. The charge stays in place and nothing "
        "is returned to the card. Check the charge date on the Payments page; if it is "
        "still eligible, submit the request from that charge rather than from a later one. "
        "A charge that was already refunded cannot be refunded a second time.",
    ),
    _ErrorText(
        "data-export",
        "export already running",
        "{code} is returned when you start an export while another export job for the "
        "same workspace is still queued or running, because only one job per workspace is "
        "allowed at a time. Wait for the current job to finish, or cancel it from the Data "
        "page, and then start the new export.",
    ),
    _ErrorText(
        "invoices",
        "purchase order number rejected",
        "{code} means an invoice could not be regenerated because its purchase order "
        "number contains characters we cannot print, such as emoji or line breaks, or is "
        "longer than 64 characters. Edit the number under Settings, Payments, keep to "
        "letters, digits and dashes, and ask support to reissue the affected invoice.",
    ),
    _ErrorText(
        "rate-limits",
        "too many requests",
        "{code} accompanies HTTP 429 responses when an API key has used up its allowance "
        "for the current sixty-second window. Read the Retry-After header, pause for that "
        "many seconds, then resume with exponential backoff. If several services share one "
        "key, give each its own so that one busy job cannot starve the others.",
    ),
    _ErrorText(
        "webhooks",
        "endpoint rejected the signature",
        "{code} is logged on a webhook event when your endpoint answers 401 or 403, which "
        "almost always means it rejected our signature. It usually follows a signing key "
        "rotation that was done in the app but not in your service. Copy the current "
        "signing key from the Webhooks page into your endpoint configuration and replay "
        "the failed events.",
    ),
    _ErrorText(
        "seats",
        "no free seat for the invitation",
        "{code} is shown when an invitation cannot be sent because every paid seat is "
        "taken, including seats held by pending invitations. Revoke stale invitations or "
        "remove members who have left, then invite again. Alternatively, buy additional "
        "seats from the Plan page and resend the invitation.",
    ),
    _ErrorText(
        "sso",
        "SAML response outside the allowed clock skew",
        "{code} occurs during single sign-on when the SAML response from your provider "
        "carries a timestamp outside the accepted five-minute skew. The usual cause is a "
        "provider server whose clock has drifted. Synchronise that clock with NTP, and "
        "confirm that the entity ID configured on the Security page matches the provider "
        "exactly.",
    ),
    _ErrorText(
        "storage",
        "upload refused because the workspace is full",
        "{code} is returned for an upload when the workspace has no storage left. Files "
        "already stored are not affected and remain editable. Empty the trash, remove old "
        "file versions or add a storage pack, and retry the upload once the usage bar "
        "shows room again.",
    ),
    _ErrorText(
        "api-keys",
        "API key revoked or expired",
        "{code} means the API key on the request has been revoked or has passed its "
        "expiry date. Our client libraries never retry requests that fail this way. Create "
        "a new key on the Developer page, deploy it, and remove the old key from your "
        "configuration and CI variables.",
    ),
    _ErrorText(
        "backups",
        "requested backup is not available",
        "{code} appears when a restore is requested from a nightly backup that is no "
        "longer kept, or for a project that was created after the chosen backup was taken. "
        "Pick a more recent backup from the list on the Data page; the list only shows "
        "backups that can actually be restored for the selected project.",
    ),
    _ErrorText(
        "downtime-credits",
        "credit claim filed too late",
        "{code} is the answer to a credit claim submitted more than thirty days after the "
        "incident, or for a period of announced maintenance. Late claims cannot be "
        "reopened. Check the incident date on the status page and, if the claim was in "
        "fact on time, reply to the rejection email with the incident reference.",
    ),
    _ErrorText(
        "cancellations",
        "cancellation blocked by an open balance",
        "{code} stops a cancellation when the workspace still has an unpaid invoice. "
        "Settle the outstanding amount under Settings, Payments, wait for the payment to "
        "clear, and then cancel again. Only owners see the cancel button, so admins who "
        "get this message should forward it to the owner.",
    ),
    _ErrorText(
        "tax",
        "VAT number failed validation",
        "{code} means the VAT number entered could not be validated against the official "
        "EU or UK register. Check the country prefix and remove any dots or gaps. The "
        "registers are sometimes offline; if the number is correct, try again later. No "
        "VAT is left off an invoice until validation succeeds.",
    ),
    _ErrorText(
        "two-factor",
        "one-time code rejected",
        "{code} appears when a two-factor authentication code is rejected, most often "
        "because the phone's clock is off by more than thirty seconds. Turn on automatic "
        "time on the phone and try a fresh code. After five rejected codes the account is "
        "locked for fifteen minutes, although a recovery code still works during the lock.",
    ),
    _ErrorText(
        "sandbox",
        "sandbox refresh in progress",
        "{code} is returned by API calls to a sandbox that is being refreshed from "
        "production. A refresh takes a few minutes for typical workspaces. Wait until the "
        "sandbox shows Ready on the Developer page; calls made during the refresh are not "
        "queued and must be sent again.",
    ),
)


class _ApiDoc(NamedTuple):
    citekey: str
    topic: str
    title: str
    identifiers: tuple[str, ...]
    text: str


_API_DOCS: tuple[_ApiDoc, ...] = (
    _ApiDoc(
        "api-invoice-events",
        "invoices",
        "Invoice events in the API",
        ("invoice.finalized", "invoice.payment_failed"),
        "Two events describe the life of an invoice. `invoice.finalized` fires when an "
        "invoice is locked and numbered, shortly before the charge is attempted. "
        "`invoice.payment_failed` fires each time the charge for that invoice does not go "
        "through; its payload holds the attempt number, the reason reported by the card "
        "network and the time of the next scheduled attempt.\n\n"
        "## Handling the event\n\n"
        "Use the payment failure event to warn your own finance team or to pause "
        "provisioning in your systems. It can arrive more than once for the same attempt, "
        "so deduplicate on the event ID before acting on it.",
    ),
    _ApiDoc(
        "api-export-jobs",
        "data-export",
        "Export jobs in the API",
        ("exports.create", "export_job_status"),
        "Exports started through the API run as background jobs. `exports.create` queues "
        "a job for the workspace and returns its ID straight away. Poll "
        "`export_job_status` with that ID to follow the job: the status moves from queued "
        "to running to ready, or to error with a message. When it reaches ready, the "
        "response includes a signed download link for the archive.\n\n"
        "## Polling politely\n\n"
        "Poll no more than once every thirty seconds, since large workspaces can take an "
        "hour. Each poll counts against the normal API allowance of the key.",
    ),
    _ApiDoc(
        "api-webhook-settings",
        "webhooks",
        "Webhook endpoint settings in the API",
        ("webhooks.retry_policy", "webhooks.signing_algorithm"),
        "Endpoints can be managed in code as well as on the Webhooks page. The "
        "`webhooks.retry_policy` field chooses between exponential, which waits longer "
        "after each failure, and fixed, which waits the same ten minutes every time. The "
        "`webhooks.signing_algorithm` field selects HMAC-SHA256, the default, or Ed25519 "
        "for endpoints that prefer public-key verification.\n\n"
        "## Changing settings safely\n\n"
        "Updates apply to events created after the change. Events already waiting for a "
        "retry keep the policy they started with, so a change never reorders work that is "
        "in flight.",
    ),
    _ApiDoc(
        "api-seat-events",
        "seats",
        "Seat events in the API",
        ("seat.assigned", "seat.released"),
        "`seat.assigned` is sent when an invited member accepts and starts using a seat, "
        "with the member's ID, email and role. `seat.released` is sent when a member is "
        "removed or leaves, and names the admin who made the change. Together they let an "
        "HR system keep its own roster in step with the workspace.\n\n"
        "## Ordering\n\n"
        "The two events for one member can arrive out of order after network trouble. "
        "Compare their occurred_at timestamps instead of trusting the order in which they "
        "arrive.",
    ),
    _ApiDoc(
        "api-rate-limit-fields",
        "rate-limits",
        "Rate limit fields in API responses",
        ("rate_limit.remaining", "rate_limit.reset_at"),
        "Every API response carries the caller's current allowance so that clients can "
        "slow down before they are rejected. `rate_limit.remaining` holds the number of "
        "calls left in the current window, and `rate_limit.reset_at` holds the moment, in "
        "UTC, when the window starts over. The same values are sent as response headers "
        "for clients that do not parse the body.\n\n"
        "## Using the fields\n\n"
        "A client that checks these values before each batch rarely sees a 429. Treat them "
        "as advisory: other services that use the same key draw from the same allowance.",
    ),
    _ApiDoc(
        "api-backup-objects",
        "backups",
        "Backup objects in the API",
        ("backup.completed", "backup_restore_request"),
        "`backup.completed` is sent after each nightly backup finishes, with the backup "
        "ID, its size and the region that holds the second copy. To start a restore from "
        "code, send a `backup_restore_request` naming the backup ID and either the whole "
        "workspace or one project.\n\n"
        "## Limits\n\n"
        "Only API keys that belong to an owner may create a restore request, and only one "
        "restore can run per workspace at a time. The request returns immediately; "
        "completion is reported by email and on the Data page.",
    ),
)


class _Guide(NamedTuple):
    citekey: str
    topic: str
    title: str
    sections: tuple[tuple[str, str], ...]


_GUIDES: tuple[_Guide, ...] = (
    _Guide(
        "guide-getting-started",
        "seats",
        "Getting started with your workspace",
        (
            (
                "Create your workspace",
                "Everything in the product lives inside a workspace: projects, files, "
                "comments, automations and the people who work on them. The person who signs "
                "up becomes the owner and can later hand that role to someone else. Pick a "
                "workspace name your colleagues will recognise, because it appears in "
                "invitation emails and in the address bar. You can rename it later, but "
                "links shared before the change keep pointing to the old address for a "
                "while before they redirect.",
            ),
            (
                "Invite your team",
                "Open the People page and add colleagues by email address, one at a time or "
                "by pasting a list. Each person who accepts takes one seat. Give admin "
                "rights sparingly: admins can change security settings, manage integrations "
                "and remove members. Everyone else joins as a member, and outside "
                "collaborators can join as guests who only see the projects you share with "
                "them. Invitations expire after a week, so resend them if someone was on "
                "holiday.",
            ),
            (
                "Organise projects",
                "Projects group the work of one team or one initiative. Start with a handful "
                "rather than mirroring the whole org chart on day one; it is easy to split a "
                "busy project later and tedious to merge many quiet ones. Each project has "
                "its own members, so a project can stay private to a small group even inside "
                "a large workspace. Templates let you reuse a structure that worked well, "
                "including its folders, task lists and automation rules.",
            ),
            (
                "Connect your tools",
                "Most teams connect at least a chat tool and a calendar during their first "
                "week. Integrations are listed on the Integrations page and are switched on "
                "per workspace by an admin. If you want to build your own connection, read "
                "the integrations guide first: it explains keys, webhooks and how to "
                "experiment without touching live data. Connections made by a member stop "
                "working when that member leaves, so use a shared service account for "
                "anything the whole team depends on.",
            ),
            (
                "Choose a plan",
                "New workspaces begin on a trial so that you can explore every feature "
                "before paying. When you are ready, pick monthly or annual payment for a "
                "standard subscription, or talk to us about an enterprise agreement if you "
                "need contract terms, invoicing by purchase order or dedicated onboarding. "
                "The plan articles in this help center list the exact allowances for each "
                "plan, and those numbers are what your workspace enforces.",
            ),
            (
                "Where to get help",
                "Search this help center first; most questions about plans, security and "
                "data are answered in a short article. If something looks broken, check the "
                "status page before opening a ticket, because known incidents are posted "
                "there within minutes. When you do contact support, include the workspace "
                "address and what you expected to happen. Owners and admins can see every "
                "ticket their workspace has opened on the Support page.",
            ),
        ),
    ),
    _Guide(
        "guide-security-checklist",
        "sso",
        "Security checklist for workspace admins",
        (
            (
                "Know who owns the workspace",
                "Every workspace has exactly one owner, and that account can do things "
                "nobody else can, such as deleting the workspace or changing how it is paid "
                "for. Make sure the owner is a role account or a long-standing colleague "
                "rather than whoever happened to sign up first. Write down who holds it "
                "somewhere outside the product, so that a departure or a lost phone does "
                "not leave the workspace without anyone able to administer it.",
            ),
            (
                "Turn on two-factor authentication",
                "Passwords leak, and a second factor stops most account takeovers that "
                "begin with a reused password. Turn on two-factor authentication for your "
                "own account first, then make it mandatory for everyone from the Security "
                "page. Members are asked to enrol at their next sign-in. Ask people to keep "
                "their one-time fallback codes in a password manager rather than in a note "
                "on the same phone.",
            ),
            (
                "Connect single sign-on",
                "If your company already runs a SAML or OpenID Connect provider, single "
                "sign-on gives you one place to grant and withdraw access. Test the "
                "connection with an admin account before enforcing it, and keep one "
                "break-glass admin who can still sign in with a password in case the "
                "provider is down. After enforcement, people removed from the provider "
                "lose access at their next sign-in check, which makes offboarding much "
                "faster.",
            ),
            (
                "Review roles every quarter",
                "Roles tend to grow over time: someone is made an admin for a one-off "
                "migration and never steps back. Once a quarter, open the People page, sort "
                "by role and ask whether each admin still needs the rights. Guests deserve "
                "the same review, since they often belong to agencies or contractors whose "
                "engagement has ended. Removing a role takes effect immediately and does "
                "not delete anything the person created.",
            ),
            (
                "Handle API keys like passwords",
                "An API key acts with the permissions of the member who created it, so a "
                "key made by an admin is as powerful as that admin. Create keys from "
                "dedicated service accounts, store them in your deployment's vault rather "
                "than in source code, and rotate them on a schedule. When someone leaves, "
                "list the keys they created on the Developer page and replace each one "
                "before removing the account.",
            ),
            (
                "Watch the audit log",
                "The audit log shows sign-ins, role changes, exports and key activity for "
                "the whole workspace. Skim it after any change to security settings and "
                "whenever something looks odd, such as an export nobody remembers asking "
                "for. Larger organisations usually forward the log to their own monitoring "
                "system through a webhook, where alerts can be raised on unusual patterns "
                "like many failed sign-ins from a new country.",
            ),
            (
                "Plan for departures",
                "Many security incidents in small teams come from accounts that outlive the "
                "people who used them. Write down the steps for a departure: remove the "
                "member, transfer their projects, revoke their keys, and check for "
                "integrations they connected. With single sign-on, removing the person in "
                "the provider handles the first step, but keys and integrations still need "
                "a human to look at them.",
            ),
        ),
    ),
    _Guide(
        "guide-payments-and-plans",
        "invoices",
        "How payments, plans and invoices fit together",
        (
            (
                "The four plans",
                "The product is sold on four plans. A trial gives a new workspace full "
                "access for a short period without a card. Monthly and annual plans have the "
                "same features and differ in how often you pay and in some allowances. "
                "Enterprise plans are negotiated contracts that add higher limits, invoicing "
                "by purchase order and a named contact. Each plan has its own article for "
                "every topic in this help center, because the numbers differ between plans.",
            ),
            (
                "Renewals and charges",
                "Paid plans renew automatically on the same date each period, using the "
                "card or bank details saved under Settings, Payments. The renewal charge "
                "covers the coming period in advance. Seats and storage packs added partway "
                "through are prorated and appear on the next renewal. If you want to change "
                "plans, doing it shortly before the renewal date keeps the arithmetic "
                "simple for your finance team.",
            ),
            (
                "Reading an invoice",
                "Each invoice lists the plan, the period it covers, every seat and add-on "
                "with its unit price, any discount and the tax applied, followed by the "
                "total. The invoice number and the date it was issued are the two details "
                "your accounts payable team will ask for. Company details and purchase "
                "order numbers printed on future invoices can be changed by the owner at "
                "any time.",
            ),
            (
                "Tax on your charges",
                "Whether tax is added depends on where your organisation is registered, not "
                "on where your members work. Businesses with a valid VAT number in the EU or "
                "UK are usually charged under the reverse charge rules, and organisations "
                "with a tax exemption can upload their paperwork for review. The tax "
                "articles explain which documents we need and how long the check takes.",
            ),
            (
                "When a payment fails",
                "Cards expire and banks block unusual charges, so a renewal sometimes does "
                "not go through. We retry automatically and email the owner, and the "
                "workspace keeps running for a while so that nobody is locked out over a "
                "paperwork problem. Updating the card, or switching to bank transfer, "
                "triggers a new attempt within the hour. If the attempts keep failing, the "
                "workspace eventually becomes read-only until the balance is settled.",
            ),
            (
                "Changing or ending a plan",
                "Upgrades apply immediately and the difference is prorated. Downgrades take "
                "effect at the next renewal, so you keep what you paid for until then. "
                "Ending a paid plan follows the cancellation rules for that plan, including "
                "any notice that has to be given, and a refund is only possible within the "
                "limits described in the refund articles. Nothing is deleted when a plan "
                "ends; the workspace simply becomes read-only.",
            ),
        ),
    ),
    _Guide(
        "guide-data-lifecycle",
        "data-export",
        "The life of your data: storage, backups, deletion and export",
        (
            (
                "Where your data lives",
                "Workspace content is stored in the region chosen when the workspace was "
                "created, either the EU or the US. Files, comments and project structure are "
                "kept in that region, and a nightly copy goes to a second data centre inside "
                "the same jurisdiction. Moving a workspace between regions is possible on "
                "request but needs a planned maintenance window, because every file has to "
                "be copied and verified.",
            ),
            (
                "Nightly backups",
                "Backups exist to recover from disasters and from mistakes that the trash "
                "cannot undo, such as a bulk edit that overwrote hundreds of tasks. They are "
                "taken automatically every night and encrypted. Owners can restore a whole "
                "workspace or a single project from the Data page. How far back you can go "
                "depends on your plan; the plan articles give the exact number of days.",
            ),
            (
                "Deleting and recovering",
                "Deleted projects and files first go to the trash, where members can bring "
                "them back themselves. After that they sit in a recovery window that only "
                "owners can reach, and then they are removed for good. The delay protects "
                "against accidents and malicious deletions alike. If something has to be "
                "gone immediately, for example because it was uploaded by mistake and holds "
                "personal data, support can remove it permanently on request.",
            ),
            (
                "Exporting everything",
                "An export produces a complete, machine-readable copy of the workspace: "
                "projects and tasks as JSON, tables as CSV, and files in their original "
                "formats. Exports run in the background and can take a while for large "
                "workspaces; you get an email with a download link when the job is done. "
                "Many teams schedule a regular export as an extra safeguard that does not "
                "depend on our own backups.",
            ),
            (
                "Leaving the product",
                "If you decide to move to another tool, export first, check that the copy "
                "opens correctly, and only then end your plan. After cancellation the "
                "workspace stays readable for a time, which gives you a second chance to "
                "fetch anything that was missed. Once the workspace is deleted and the "
                "recovery window has passed, we cannot bring it back, and backups that "
                "contain it expire on their normal schedule.",
            ),
            (
                "Requests from regulators and individuals",
                "Under GDPR and similar laws, people can ask what data is held about them "
                "and ask for it to be removed. Requests about members of your workspace "
                "should go to you as the controller; we act as processor and help you "
                "fulfil them. Support can locate and delete a named person's content across "
                "a workspace and confirms in writing when it is done. Requests from "
                "authorities are handled as described in our transparency report.",
            ),
        ),
    ),
    _Guide(
        "guide-building-integrations",
        "webhooks",
        "Building an integration with the API",
        (
            (
                "Authenticate with a key",
                "Server-to-server integrations authenticate with an API key sent in the "
                "Authorization header. Create the key from a service account rather than a "
                "personal one, so that the integration survives staff changes, and give "
                "that account only the projects it needs. Keys expire on a schedule that "
                "depends on the plan, so build rotation into your deployment from the start "
                "instead of treating it as an emergency later.",
            ),
            (
                "Experiment in a sandbox",
                "A sandbox is a separate workspace for development with its own keys and "
                "endpoints. Point your integration at it while you build, fill it with "
                "realistic sample projects, and refresh it from production when you need a "
                "fresh copy of the structure. Nothing in a sandbox sends email to real "
                "people, so you can test notification flows without surprising your "
                "colleagues.",
            ),
            (
                "Respect the rate limits",
                "The API counts calls per key in a short sliding window. Read the allowance "
                "fields in every response and slow down before you reach zero, rather than "
                "waiting for rejections. Use the batch endpoints for bulk work: a batch of a "
                "hundred records costs the same as one call. When you do receive a 429, wait "
                "for the number of seconds the response suggests and then back off "
                "exponentially.",
            ),
            (
                "Receive webhooks",
                "Polling for changes is wasteful; subscribe to webhooks instead. Register an "
                "HTTPS endpoint, choose the events you need, and verify the signature on "
                "every request before trusting it. Answer quickly with a 2xx status and do "
                "the real work in a background queue, because slow endpoints are treated as "
                "failures and retried. Make handlers idempotent, since the same event can "
                "arrive twice.",
            ),
            (
                "Handle errors deliberately",
                "Every error response carries an HTTP status and an error code made of the "
                "letters ERR and four digits. Log the code together with the request ID; "
                "it is the quickest way for support to find what happened. Retry only "
                "errors that are marked as temporary, such as rate limiting and brief "
                "maintenance, and show the rest to a person. Each error code has its own "
                "article in this help center explaining the cause and the fix.",
            ),
            (
                "Go live",
                "Before switching to production, create production keys, register the "
                "production webhook endpoint, and run your test suite against the sandbox "
                "one last time. Watch the first day of traffic in the audit log and in your "
                "own logs. Keep the sandbox afterwards: it is the safest place to try the "
                "next change, and refreshing it every few weeks keeps it close to what "
                "production looks like.",
            ),
        ),
    ),
    _Guide(
        "guide-incidents-and-support",
        "downtime-credits",
        "Incidents, status updates and working with support",
        (
            (
                "How we report incidents",
                "When something breaks, the on-call engineer posts to the status page within "
                "minutes, even before the cause is known. Updates follow at least every half "
                "hour until the issue is resolved. You can subscribe to the status page by "
                "email or RSS, and admins can choose to receive incident notices for their "
                "own region only. The status page is hosted separately from the product, so "
                "it stays reachable when the product does not.",
            ),
            (
                "What counts as downtime",
                "Downtime means that members cannot sign in, cannot load projects, or get "
                "server errors on most requests in your region. Slowness, a single broken "
                "feature, or problems caused by your own network or integrations do not "
                "count. Maintenance announced at least two days ahead is excluded as well. "
                "Our monitoring measures availability from several locations, and those "
                "measurements are what credit claims are checked against.",
            ),
            (
                "Opening a good ticket",
                "A ticket that says what you did, what you expected and what happened "
                "instead gets solved faster than one that says it is broken. Include the "
                "workspace address, the approximate time with your time zone, and any error "
                "code or request ID you saw. Screenshots help with layout problems; for API "
                "problems, the request and the response with the key removed are more "
                "useful. One topic per ticket keeps the conversation easy to follow.",
            ),
            (
                "Escalation",
                "If a ticket is urgent and blocks several people, mark it so when you open "
                "it; urgent tickets page the on-call engineer outside business hours. If a "
                "ticket seems stuck, reply to it and ask for escalation rather than opening "
                "a new one, since duplicates start again at the end of the queue. Enterprise "
                "contracts include a named contact who can escalate on your behalf.",
            ),
            (
                "After the incident",
                "For every significant incident we publish a written review within five "
                "business days. It explains what failed, how long members were affected, "
                "what we did to recover and what we are changing so that it does not happen "
                "again. Reviews are linked from the status page. If your organisation needs "
                "a formal report for its own auditors, support can provide one on request.",
            ),
            (
                "Asking for a credit",
                "If an incident affected you for longer than our uptime commitment allows, "
                "you may be entitled to a credit on your next invoice. Claims go through "
                "support and need the workspace and the period affected. The plan articles "
                "state how the credit is calculated, and the error articles explain why a "
                "claim can be rejected. Credits reduce future charges and are never paid "
                "out.",
            ),
        ),
    ),
)

_NOANSWER: tuple[str, ...] = (
    "do you ship physical hardware to Antarctica",
    "can I pay with livestock",
    "what is the name of the office dog",
    "how do I book a meeting room in your Berlin office",
    "is there a loyalty scheme that earns airline miles",
    "which font is used in your logo",
    "can the product translate Klingon poetry",
    "how do I reset the thermostat in my flat",
    "who won the company chess tournament last spring",
    "do you sell printed wall calendars",
    "what is the parking policy at your headquarters",
    "can I rent a physical server rack from you",
    "how many calories are in the cafeteria lasagna",
    "is there a lifetime deal paid in gold bars",
    "what is the recipe for the onboarding cookies",
    "is the product soundtrack available on vinyl",
)

_ERR_SPELLINGS: tuple[str, ...] = ("ERR-{d}", "err {d}", "err{d}")
_ERR_WRAPPERS: tuple[str, ...] = (
    "what does {c} mean",
    "{c}",
    "getting {c} when I retry",
    "how to fix {c}",
)
_ID_WRAPPERS: tuple[str, ...] = (
    "{i}",
    "what is in the {i} payload",
    "when is {i} sent",
)
_FOLLOWUPS: tuple[str, ...] = (
    "what about {plan} plans?",
    "and on the {plan} plan?",
    "is it different for {plan}?",
    "what if I'm on {a_plan} plan?",
)
_EXACTS: tuple[str, ...] = (
    "{aspect} {plan} plan",
    "{aspect} on {plan} plans",
    "{plan} plan {aspect}",
)
_TWOPARTS: tuple[str, ...] = (
    "{x1} on {p1} plans and {x2} on {p2} plans",
    "{x1} for {p1} and {x2} for {p2}",
    "{x1} on {a1} plan, and also the {x2} on {a2} plan?",
)

_WORD = re.compile(r"[a-z0-9]+")
_SUFFIXES: tuple[str, ...] = ("ments", "ment", "ation", "ing", "ed", "es", "s", "y", "e")


def _article(plan: str) -> str:
    return f"an {plan}" if plan[0] in "aeiou" else f"a {plan}"


def _stem(token: str) -> str:
    # Deliberately crude and aggressive: a synonym counts as present if any word in
    # the corpus merely starts with its stem, which errs toward rejecting the corpus
    # rather than letting a stemming analyzer match a "query-only" synonym.
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if token.endswith(suffix) and len(token) - len(suffix) >= 4:
                token = token[: -len(suffix)]
                changed = True
                break
    return token


def _prefix_re(stems: Iterable[str]) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(re.escape(s) for s in stems) + r")", re.IGNORECASE)


def _doc(
    citekey: str, title: str, text: str, topic: str, plan: str | None, kind: str
) -> dict[str, Any]:
    return {
        "citekey": citekey,
        "title": title,
        "text": text,
        "metadata": {"topic": topic, "plan": plan, "kind": kind},
        "tenant": None,
        "readers": [],
        "language": "en",
    }


def _fill(template: str, plan: str, n: int | None = None) -> str:
    return template.format(plan=plan, Plan=plan.capitalize(), a_plan=_article(plan), n=n)


def build_corpus(seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """Build the help-center corpus; the same seed always gives the same records."""
    rng = random.Random(seed)
    docs: list[dict[str, Any]] = []
    for key, topic in _TOPIC_TEXT.items():
        drawn = sorted(rng.sample(topic.numbers, len(_GENEROSITY)), reverse=True)
        number = dict(zip(_GENEROSITY, drawn, strict=True))
        for plan in PLANS:
            docs.append(
                _doc(
                    f"{key}-{plan}",
                    _fill(topic.title, plan),
                    _fill(topic.body, plan, number[plan]),
                    key,
                    plan,
                    "policy",
                )
            )
    # 4000-9999: four digits and above every allowance drawn above, so a code's
    # digits cannot collide with a plan number
    codes = rng.sample(range(4000, 10000), len(_ERRORS))
    for code, err in zip(codes, _ERRORS, strict=True):
        spelled = f"ERR-{code}"
        docs.append(
            _doc(
                f"err-{code}",
                f"{spelled}: {err.headline}",
                err.text.format(code=spelled),
                err.topic,
                None,
                "error",
            )
        )
    for api in _API_DOCS:
        docs.append(_doc(api.citekey, api.title, api.text, api.topic, None, "api"))
    for guide in _GUIDES:
        text = "\n\n".join(f"## {head}\n\n{body}" for head, body in guide.sections)
        docs.append(_doc(guide.citekey, guide.title, text, guide.topic, None, "guide"))
    _validate(docs)
    return docs


def _haystack(doc: dict[str, Any]) -> str:
    return f"{doc['title']}\n{doc['text']}"


def _validate(docs: Sequence[dict[str, Any]]) -> None:
    """Reject a corpus that would make the judged labels wrong.

    Raises ValueError rather than using assert so the checks survive ``python -O``.
    """
    keys = [d["citekey"] for d in docs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate citekeys in the synthetic corpus")

    synonym_stems = {
        _stem(tok)
        for terms in TOPICS.values()
        for syn in terms.synonyms
        for tok in _WORD.findall(syn.lower())
    }
    syn_re = _prefix_re(sorted(synonym_stems))
    for d in docs:
        hit = syn_re.search(_haystack(d))
        if hit:
            raise ValueError(f"{d['citekey']}: query-only synonym leaks as {hit.group(0)!r}")

    for d in docs:
        if d["metadata"]["kind"] != "error":
            continue
        code = d["citekey"].split("-", 1)[1]
        holders = [x["citekey"] for x in docs if re.search(rf"\b{code}\b", _haystack(x))]
        if holders != [d["citekey"]]:
            raise ValueError(f"code {code} occurs in {holders}, expected only {d['citekey']}")

    for api in _API_DOCS:
        for ident in api.identifiers:
            holders = [x["citekey"] for x in docs if ident in _haystack(x)]
            if holders != [api.citekey]:
                raise ValueError(f"identifier {ident} occurs in {holders}")

    for key, topic in _TOPIC_TEXT.items():
        own = {f"{key}-{p}" for p in PLANS}
        found = {x["citekey"] for x in docs if topic.aspect.lower() in _haystack(x).lower()}
        if found != own:
            raise ValueError(f"aspect {topic.aspect!r} is misplaced in {sorted(found ^ own)}")

    for d in docs:
        meta = d["metadata"]
        if meta["kind"] == "guide":
            continue
        # a policy document may name only its own plan; errors and API docs none
        foreign = [s for p, s in _PLAN_STEMS.items() if p != meta["plan"]]
        hit = _prefix_re(foreign).search(_haystack(d))
        if hit:
            raise ValueError(f"{d['citekey']}: mentions another plan as {hit.group(0)!r}")


def _policy_key(topic: str, plan: str) -> str:
    return f"{topic}-{plan}"


def build_queries(
    corpus: Sequence[dict[str, Any]], seed: int = DEFAULT_SEED
) -> list[dict[str, Any]]:
    """Judged queries over ``corpus`` in six slices; deterministic for a seed."""
    # a stream of its own, so adding a document never reshuffles the queries
    rng = random.Random(f"pgfunnel-queries-{seed}")
    citekeys = {d["citekey"] for d in corpus}
    topics = list(_TOPIC_TEXT)
    out: list[dict[str, Any]] = []

    def add(slice_: str, query: str, relevant: dict[str, int], history: list[str]) -> None:
        missing = set(relevant) - citekeys
        if missing:
            raise ValueError(f"{slice_} query {query!r} judges unknown citekeys {missing}")
        n = sum(1 for q in out if q["slice"] == slice_) + 1
        out.append(
            {
                "query_id": f"{slice_}-{n:02d}",
                "query": query,
                "slice": slice_,
                "relevant": relevant,
                "history": history,
            }
        )

    # identifier: error codes in three spellings, then API identifiers
    errors = [d for d in corpus if d["metadata"]["kind"] == "error"]
    for i, doc in enumerate(rng.sample(errors, 12)):
        digits = doc["citekey"].split("-", 1)[1]
        spelled = _ERR_SPELLINGS[i % len(_ERR_SPELLINGS)].format(d=digits)
        wrapper = _ERR_WRAPPERS[(i // len(_ERR_SPELLINGS)) % len(_ERR_WRAPPERS)]
        add("identifier", wrapper.format(c=spelled), {doc["citekey"]: 1}, [])
    for i, api in enumerate(_API_DOCS):
        ident = rng.choice(api.identifiers)
        add("identifier", _ID_WRAPPERS[i % len(_ID_WRAPPERS)].format(i=ident), {api.citekey: 1}, [])

    for key in rng.sample(topics, 16):
        plan = rng.choice(PLANS)
        template = rng.choice(_TOPIC_TEXT[key].paraphrases)
        add("paraphrase", _fill(template, plan), {_policy_key(key, plan): 1}, [])

    for i, key in enumerate(rng.sample(topics, 16)):
        plan = rng.choice(PLANS)
        query = _EXACTS[i % len(_EXACTS)].format(aspect=_TOPIC_TEXT[key].aspect, plan=plan)
        add("exact", query, {_policy_key(key, plan): 1}, [])

    for i, key in enumerate(rng.sample(topics, 16)):
        plan = rng.choice(PLANS)
        history = [_TOPIC_TEXT[key].ask]
        if i % 4 == 3:
            # an older, unrelated turn first: the follow-up refers to the latest topic
            other = rng.choice([t for t in topics if t != key])
            history.insert(0, _TOPIC_TEXT[other].ask)
        query = _fill(_FOLLOWUPS[i % len(_FOLLOWUPS)], plan)
        add("followup", query, {_policy_key(key, plan): 1}, history)

    for i in range(15):
        k1, k2 = rng.sample(topics, 2)
        p1, p2 = rng.sample(PLANS, 2)
        query = _TWOPARTS[i % len(_TWOPARTS)].format(
            x1=_TOPIC_TEXT[k1].aspect,
            x2=_TOPIC_TEXT[k2].aspect,
            p1=p1,
            p2=p2,
            a1=_article(p1),
            a2=_article(p2),
        )
        add("twopart", query, {_policy_key(k1, p1): 1, _policy_key(k2, p2): 1}, [])

    for question in rng.sample(_NOANSWER, len(_NOANSWER)):
        add("noanswer", question, {}, [])
    return out


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_files(directory: Path, seed: int = DEFAULT_SEED) -> tuple[Path, Path]:
    """Write the corpus and the judged queries as JSON lines; return both paths."""
    directory.mkdir(parents=True, exist_ok=True)
    corpus = build_corpus(seed)
    corpus_path = directory / CORPUS_FILE
    queries_path = directory / QUERIES_FILE
    _write_jsonl(corpus_path, corpus)
    _write_jsonl(queries_path, build_queries(corpus, seed))
    return corpus_path, queries_path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pgfunnel.eval.synthetic",
        description="Regenerate the synthetic help-center corpus and its judged queries.",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "data",
        help="directory for the two .jsonl files (default: the package's data folder)",
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    corpus_path, queries_path = write_files(args.out, args.seed)
    print(f"wrote {corpus_path} and {queries_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
