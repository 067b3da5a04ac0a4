"""A local SMTP sink for the stack and the tests: every message it receives is saved as an .eml file.

Usage: python3 mail_sink.py --port 2525 --dir .stack/mail
"""
import argparse
import asyncio
import os
import time

from aiosmtpd.controller import Controller


class SaveToFolder:
    def __init__(self, folder):
        self.folder = folder
        self.count = 0

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
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    controller = Controller(SaveToFolder(args.dir), hostname=args.host, port=args.port)
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
