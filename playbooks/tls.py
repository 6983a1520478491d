"""The server's TLS key and certificate do not load. SGLang hands `--ssl-certfile`, `--ssl-keyfile` and
`--ssl-keyfile-password` to uvicorn, whose `load_cert_chain` refuses a key that is not the certificate's
(KEY_VALUES_MISMATCH), an encrypted key without its password or with a wrong one, and a certificate given as
the key (`PEM lib`). No flag makes a pair load; the flag-level change is serving plain HTTP, which changes
what clients must use: the person's call, with what to mend in the files said."""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, line_of, playbook
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import RemoveFlag

_TLS_FLAGS = (
    "--ssl-certfile",
    "--ssl-keyfile",
    "--ssl-keyfile-password",
    "--ssl-ca-certs",
    "--enable-ssl-refresh",
)
_NOT_LOADED = r"KEY_VALUES_MISMATCH|\[SSL\] PEM lib|ssl\.SSLError|load_cert_chain"


@playbook(id="sglang.network.tls-pair-does-not-load", category="other", pattern=_NOT_LOADED, priority=33)
def tls_pair_does_not_load(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """uvicorn could not load the command's TLS key and certificate."""
    given = [f for f in _TLS_FLAGS if ctx.view.has(f)]
    if "--ssl-certfile" not in given or "--ssl-keyfile" not in given:
        return None
    said = ctx.root.error_line or (line_of(m) if m else "")
    if "MISMATCH" in said:
        mend = "the key is not the certificate's: pass the key the certificate was made with"
    elif not ctx.view.has("--ssl-keyfile-password"):
        mend = "if the key is encrypted, pass --ssl-keyfile-password; check that --ssl-keyfile is a key, not the certificate"
    else:
        mend = "check --ssl-keyfile-password and that --ssl-keyfile is the private key, not the certificate"
    return fix(
        ctx,
        [RemoveFlag(flag=f) for f in given],
        "other",
        f"the TLS key and certificate the command gives do not load ({said.strip()[:120]})",
        why=f"uvicorn's load_cert_chain refused them; {mend}. Without the TLS flags the server runs plain "
        "HTTP, which its clients must then use: yours to confirm",
        evidence=(said.strip(),),
        confidence=0.45,
    )


_OWN_CHECK_REFUSED = r"CERTIFICATE_VERIFY_FAILED[^\n]{0,120}(?:mismatch|not valid for)"


@playbook(
    id="sglang.network.tls-own-warmup-unverified", category="other", pattern=_OWN_CHECK_REFUSED, priority=33
)
def tls_own_warmup_unverified(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang's own warm-up request (to its host and port) verifies the server certificate against
    --ssl-ca-certs, and the certificate does not name the address SGLang calls: the server kills itself
    though clients that use its name would be fine."""
    if not ctx.view.has("--ssl-ca-certs") or "_execute_server_warmup" not in ctx.log_text:
        return None
    return fix(
        ctx,
        [RemoveFlag(flag="--ssl-ca-certs")],
        "other",
        "SGLang's own warm-up request refuses the server's certificate: it does not name the address SGLang "
        "calls itself on",
        why="with --ssl-ca-certs SGLang verifies its own certificate when it warms up over HTTPS; without it the "
        "warm-up does not verify, and clients still do (or issue the certificate with the server's IP or "
        "hostname in its subjectAltName)",
        evidence=(line_of(m),) if m else (),
        confidence=0.45,
    )
