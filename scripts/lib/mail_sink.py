"""A local SMTP sink for the stack and the tests: every message it receives is saved as an .eml file.

Usage: python3 mail_sink.py --port 2525 --dir .stack/mail [--reject-prefix PREFIX]
                            [--tls-cert CERT --tls-key KEY] [--auth USER:PASSWORD]
(--reject-prefix: recipients starting with PREFIX are refused with 550, as a server refuses an
address that does not exist. SIGUSR1 turns refusing every message with 451 (a temporary failure,
as a server that is overloaded answers) on, and the next one off: scripts/faults/smtp-refuse. --tls-cert/--tls-key: STARTTLS is offered and required before MAIL.
--auth: AUTH PLAIN/LOGIN with these credentials is required (over TLS only when --tls-cert is
given). Tests use them to check the transport as a real provider would treat it.)
"""
import argparse
import asyncio
import os
import signal
import ssl
import time

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult


class SaveToFolder:
    def __init__(self, folder, reject_prefix=None):
        self.folder = folder
        self.count = 0
        self.reject_prefix = reject_prefix
        self.refusing = False

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        if self.refusing:
            return "451 4.3.2 Not accepting mail at the moment"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if self.reject_prefix and address.lower().startswith(self.reject_prefix):
            return "550 5.1.1 No such mailbox here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.count += 1
        name = f"{time.time_ns()}-{self.count:06d}.eml"
        path = os.path.join(self.folder, name)
        tmp = path + ".part"
        with open(tmp, "wb") as f:
            f.write(f"X-Envelope-From: {envelope.mail_from}\r\n".encode())
            f.write(f"X-Envelope-To: {', '.join(envelope.rcpt_tos)}\r\n".encode())
            f.write(envelope.original_content or envelope.content)
        os.replace(tmp, path)  # readers never see a half-written message
        return "250 Message accepted for delivery"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=2525)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--reject-prefix", default=None)
    parser.add_argument("--tls-cert", default=None)
    parser.add_argument("--tls-key", default=None)
    parser.add_argument("--auth", default=None)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    options = {}
    if args.tls_cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        options.update(tls_context=context, require_starttls=True)
    if args.auth:
        user, password = args.auth.split(":", 1)

        def authenticate(server, session, envelope, mechanism, auth_data):
            ok = auth_data.login == user.encode() and auth_data.password == password.encode()
            # handled=False: aiosmtpd answers 535 itself (handled=True would leave the client waiting).
            return AuthResult(success=ok, handled=False)

        options.update(authenticator=authenticate, auth_required=True, auth_require_tls=bool(args.tls_cert))
    handler = SaveToFolder(args.dir, args.reject_prefix)

    def toggle_refusing(signum, frame):
        handler.refusing = not handler.refusing
        print(f"mail sink {'refusing' if handler.refusing else 'accepting'} mail", flush=True)

    signal.signal(signal.SIGUSR1, toggle_refusing)
    controller = Controller(handler, hostname=args.host, port=args.port, **options)
    controller.start()
    print(f"mail sink on {args.host}:{args.port}, saving to {args.dir}", flush=True)
    try:
        asyncio.get_event_loop().run_forever()
    except KeyboardInterrupt:
        pass
    finally:
        controller.stop()


if __name__ == "__main__":
    main()
