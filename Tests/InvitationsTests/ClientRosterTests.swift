import Foundation
import HTTPTypes
@testable import Invitations
import Models
import NIOCore
import ServiceKit
import ServiceKitCore
import ServiceKitHTTP
import Synchronization
import Testing
import TestSupport

/// The coach's side: who may do what, the rules of a client's fields, limits, unsubscribing,
/// changes of address, finding one's invitations from the app, and deletions.
@Suite struct ClientRosterTests {
    /// Coaches only, and only their own clients: everyone else is 403, another coach 404 on every id
    /// route; bodies are checked field by field.
    @Test func onlyCoachesManageClientsAndOnlyTheirOwn() async throws {
        try await InvitationsTestEnvironment.run { env in
            let coach = try await env.coach()
            let other = try await env.coach("Other Coach")
            let plain = try await env.user()
            let (created, _) = try await env.invite("Ben", email: "\(TestEnvironment.uniqueName("ben"))@example.com", by: coach)
            let id = try #require(created.json["id"] as? String)
            let routes: [(HTTPRequest.Method, String, Any?)] = [
                (.get, "/v1/clients/\(id)", nil), (.patch, "/v1/clients/\(id)", ["name": "X"]), (.delete, "/v1/clients/\(id)", nil),
                (.post, "/v1/clients/\(id)/invitation/resend", nil), (.post, "/v1/clients/\(id)/invitation/revoke", nil),
            ]
            for (method, path, body) in routes {
                #expect(try await env.call(method, path, json: body).status == .unauthorized, "\(method) \(path)")
                #expect(try await env.call(method, path, as: plain, json: body).status == .forbidden, "\(method) \(path)")
                let foreign = try await env.call(method, path, as: other, json: body)
                #expect(foreign.status == .notFound && foreign.headers[.contentType] == "application/problem+json", "\(method) \(path): \(foreign.text)")
            }
            #expect(try await env.call(.get, "/v1/clients", as: plain).status == .forbidden)
            // Mail goes out only for a coach whose own address is proven.
            let unproven = try await env.user("New Coach", roles: [.user, .coach], emailVerified: false)
            #expect(try await env.call(.post, "/v1/clients", as: unproven, json: ["name": "Z", "email": "z@example.com"]).code == "email_unverified")
            #expect(try await env.call(.get, "/v1/clients", as: other).items.isEmpty)
            #expect(try await env.call(.get, "/v1/clients/not-a-uuid", as: coach).status == .notFound)
            #expect(try await env.call(.get, "/v1/clients?status=lost", as: coach).code == "validation_failed")
            #expect(try await env.call(.get, "/v1/clients?cursor=garbage", as: coach).code == "invalid_cursor")

            // Bodies: malformed, wrong types, unknown fields, each field's rule, too large.
            #expect(try await env.call(.post, "/v1/clients", as: coach, raw: ByteBuffer(string: "{\"name\":"), headers: [.contentType: "application/json"]).code == "malformed_json")
            #expect(try await env.call(.post, "/v1/clients", as: coach, json: ["name": 7, "email": "a@b.co"]).status == .badRequest)
            #expect(try await env.call(.post, "/v1/clients", as: coach, json: ["name": "A", "email": "a@b.co", "role": "admin"]).status == .badRequest)
            let bad = try await env.call(.post, "/v1/clients", as: coach, json: ["name": "  ", "email": "nope", "phone": "call me", "notes": String(repeating: "n", count: 2_001)])
            // An invalid address has its own code, and names every other field's problem too.
            #expect(bad.status == .badRequest && bad.code == "invalid_email")
            let fields = Set(((bad.json["errors"] as? [[String: Any]]) ?? []).compactMap { $0["field"] as? String })
            #expect(fields == ["name", "email", "phone", "notes"], "\(bad.text)")
            #expect(try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Eve\u{202E}", "email": "e@example.com"]).code == "validation_failed")
            let huge = try await env.call(.post, "/v1/clients", as: coach, json: ["name": "A", "email": "a@example.com", "notes": String(repeating: "n", count: 3_000_000)])
            #expect(huge.status == .contentTooLarge)

            // A likely typo of a common domain, named; confirmed, it is taken as typed.
            let typo = try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Gus", "email": "gus@gmial.com"])
            #expect(typo.status == .badRequest && typo.code == "email_suspicious" && typo.text.contains("gus@gmail.com"), "\(typo.text)")
            #expect(try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Gus", "email": "gus@gmial.com", "confirm_email": true]).status == .created)

            // One live invitation per coach and address; two coaches may invite the same person, and a
            // dead invitation does not block a new one.
            let address = "\(TestEnvironment.uniqueName("dup"))@example.com"
            let (first, _) = try await env.invite("Dee", email: address, by: coach)
            #expect(try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Dee", "email": address.uppercased()]).code == "client_exists")
            #expect(try await env.call(.post, "/v1/clients", as: other, json: ["name": "Dee", "email": address]).status == .created)
            let firstID = try #require(first.json["id"] as? String)
            #expect(try await env.call(.post, "/v1/clients/\(firstID)/invitation/revoke", as: coach).status == .ok)
            #expect(try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Dee", "email": address]).status == .created)
            // Nor does a resend bring the dead one back beside the new one.
            let revived = try await env.call(.post, "/v1/clients/\(firstID)/invitation/resend", as: coach)
            #expect(revived.status == .conflict && revived.code == "client_exists", "\(revived.text)")
            #expect(try await env.call(.get, "/v1/clients/\(firstID)", as: coach).json["status"] as? String == "revoked")
        }
    }

    /// `INVITATIONS_PER_COACH_PER_DAY`: past it, `429 invite_limit` with `Retry-After`; deleting a
    /// client does not give its invitation back.
    @Test func aCoachInvitesAtMostTheDailyLimit() async throws {
        try await InvitationsTestEnvironment.run(["INVITATIONS_PER_COACH_PER_DAY": "2"]) { env in
            let coach = try await env.coach()
            let (first, _) = try await env.invite("One", email: "\(TestEnvironment.uniqueName("a"))@example.com", by: coach)
            _ = try await env.invite("Two", email: "\(TestEnvironment.uniqueName("b"))@example.com", by: coach)
            #expect(try await env.call(.delete, "/v1/clients/\(first.json["id"] as! String)", as: coach).status == .noContent)
            let third = try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Three", "email": "\(TestEnvironment.uniqueName("c"))@example.com"])
            #expect(third.status == .tooManyRequests && third.code == "invite_limit")
            #expect(Int(third.headers[.retryAfter] ?? "") ?? 0 > 3_600)
        }
    }

    /// Edits: name, phone and notes; null clears; the address only while pending, which mails the
    /// invitation again with a new code to the new address.
    @Test func editsAndAChangeOfAddress() async throws {
        try await InvitationsTestEnvironment.run(["ACCEPT_ROLE_WAIT_MS": "0"]) { env in
            let coach = try await env.coach()
            let old = "\(TestEnvironment.uniqueName("old"))@example.com", new = "\(TestEnvironment.uniqueName("new"))@example.com"
            let (created, oldCode) = try await env.invite("Fay", email: old, by: coach, extra: ["phone": "555 0101", "notes": "n"])
            let id = try #require(created.json["id"] as? String)
            let edited = try await env.call(.patch, "/v1/clients/\(id)", as: coach, json: ["name": "Fay Wray", "phone": NSNull(), "notes": "morning sessions"])
            #expect(edited.status == .ok && edited.json["name"] as? String == "Fay Wray" && edited.json["phone"] is NSNull && edited.json["notes"] as? String == "morning sessions")
            #expect(try await env.call(.patch, "/v1/clients/\(id)", as: coach, json: ["phone": "letters"]).code == "validation_failed")
            #expect(try await env.call(.patch, "/v1/clients/\(id)", as: coach, json: ["shoe_size": 9]).status == .badRequest)

            let moved = try await env.call(.patch, "/v1/clients/\(id)", as: coach, json: ["email": new])
            #expect(moved.status == .ok && moved.json["email"] as? String == new, "\(moved.text)")
            let newCode = try await env.code(mailedTo: new)
            #expect(try await env.call(.get, "/v1/invitations/\(oldCode)").code == "invitation_not_found")
            let person = try await env.user(email: new)
            #expect(try await env.call(.post, "/v1/invitations/\(newCode)/accept", as: person).status == .accepted)
            #expect(try await env.call(.patch, "/v1/clients/\(id)", as: coach, json: ["email": old]).code == "email_locked")
            #expect(try await env.call(.patch, "/v1/clients/\(id)", as: coach, json: ["notes": "still editable"]).status == .ok)
        }
    }

    /// One-click unsubscribe (RFC 8058): the mail client POSTs to the header's URL; from then on no
    /// coach's invitation reaches the address, and rosters say `suppressed`. The page a GET opens
    /// changes nothing.
    @Test func anUnsubscribedAddressGetsNoMoreInvitations() async throws {
        try await InvitationsTestEnvironment.run { env in
            let coach = try await env.coach()
            let other = try await env.coach("Other Coach")
            let email = "\(TestEnvironment.uniqueName("quiet"))@example.com"
            let (created, _) = try await env.invite("Hal", email: email, by: coach)
            let mail = try #require(try await env.mails(to: email).first)
            let link = try #require(mail.firstMatch(of: try Regex("List-Unsubscribe: <https://api.test(/v1/invitations/unsubscribe\\?token=[A-Za-z0-9_-]+)>")))
            let path = String(try #require(link.output[1].substring))
            let page = try await env.call(.get, path)
            #expect(page.status == .ok && page.headers[.contentType]?.hasPrefix("text/html") == true && page.text.contains("<form method=\"post\""))
            #expect(try await env.count("SELECT count(*) FROM unsubscribed_addresses") == 0)
            let done = try await env.call(.post, path, raw: ByteBuffer(string: "List-Unsubscribe=One-Click"), headers: [.contentType: "application/x-www-form-urlencoded"])
            #expect(done.status == .ok && done.json["unsubscribed"] as? Bool == true, "\(done.text)")
            #expect(try await env.call(.post, "/v1/invitations/unsubscribe?token=made-up").status == .notFound)

            let id = try #require(created.json["id"] as? String)
            #expect(try await env.call(.get, "/v1/clients/\(id)", as: coach).json[path: "invitation.delivery"] as? String == "suppressed")
            let again = try await env.call(.post, "/v1/clients", as: other, json: ["name": "Hal", "email": email.uppercased()])
            #expect(again.status == .created && again.json[path: "invitation.delivery"] as? String == "suppressed")
            #expect(try await env.call(.post, "/v1/clients/\(id)/invitation/resend", as: coach).json[path: "invitation.delivery"] as? String == "suppressed")
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await env.mails(to: email).count == 1)
        }
    }

    /// An address with a capital letter outside ASCII: unsubscribing drops the invitation mail not
    /// sent yet, whatever the database's locale makes of lower().
    @Test func unsubscribingDropsAPendingMailToAnAddressInAnyCase() async throws {
        try await InvitationsTestEnvironment.run(["SMTP_URL": "smtp://127.0.0.1:1"]) { env in
            let coach = try await env.coach()
            let email = "Ünal.\(TestEnvironment.uniqueName("u"))@example.com"
            #expect(try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Ünal", "email": email]).status == .created)
            let pending = "SELECT count(*) FROM mail_outbox WHERE template = 'invitation' AND status = 'pending'"
            #expect(try await env.count(pending) == 1)
            let url = Mutex("")
            try await env.withConnection { connection in
                let rows = try await connection.query("SELECT unsubscribe_url FROM mail_outbox WHERE template = 'invitation'", logger: TestEnvironment.logger)
                for try await value in rows.decode(String.self) { url.withLock { $0 = value } }
            }
            let unsubscribe = url.withLock { $0 }
            let link = try #require(unsubscribe.firstMatch(of: try Regex("(/v1/invitations/unsubscribe\\?token=[A-Za-z0-9_-]+)")), "\(unsubscribe)")
            let done = try await env.call(.post, String(try #require(link.output[1].substring)))
            #expect(done.status == .ok, "\(done.text)")
            #expect(try await env.count(pending) == 0)
        }
    }

    /// A mail not sent yet (the SMTP server is out of reach here) is dropped once its code stops
    /// working: the coach withdrew the invitation, or its addressee took a new code in the app. The
    /// roster then shows that no mail goes, not one on its way.
    @Test func aMailNotSentYetGoesNoMoreOnceItsCodeStopsWorking() async throws {
        try await InvitationsTestEnvironment.run(["SMTP_URL": "smtp://127.0.0.1:1", "ACCEPT_ROLE_WAIT_MS": "0"]) { env in
            let coach = try await env.coach()
            func mails(to address: String) async throws -> Int {
                try await env.count("SELECT count(*) FROM mail_outbox WHERE lower(recipient) = lower('\(address)')")
            }
            // Once its first sending has failed: a mail whose first sending is under way is left to it.
            func firstAttemptFailed(_ address: String) async throws {
                try await waitUntil(.seconds(10)) {
                    try await env.count("SELECT count(*) FROM mail_outbox WHERE lower(recipient) = lower('\(address)') AND attempts = 1") == 1
                }
            }
            let withdrawn = "\(TestEnvironment.uniqueName("rex"))@example.com"
            let created = try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Rex", "email": withdrawn])
            #expect(created.status == .created && created.json[path: "invitation.delivery"] as? String == "queued", "\(created.text)")
            let id = try #require(created.json["id"] as? String)
            try await firstAttemptFailed(withdrawn)
            let revoked = try await env.call(.post, "/v1/clients/\(id)/invitation/revoke", as: coach)
            #expect(revoked.json["status"] as? String == "revoked" && revoked.json[path: "invitation.delivery"] as? String == "suppressed", "\(revoked.text)")
            #expect(try await mails(to: withdrawn) == 0)

            let lost = "\(TestEnvironment.uniqueName("ivy"))@example.com"
            let pending = try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Ivy", "email": lost])
            let pendingID = try #require(pending.json["id"] as? String)
            try await firstAttemptFailed(lost)
            let ivy = try await env.user(email: lost)
            let mine = try await env.call(.get, "/v1/invitations/mine", as: ivy)
            #expect(mine.status == .ok && mine.items.count == 1, "\(mine.text)")
            #expect(try await mails(to: lost) == 0)
            #expect(try await env.call(.get, "/v1/clients/\(pendingID)", as: coach).json[path: "invitation.delivery"] as? String == "suppressed")
            let code = try #require(mine.items.first?["code"] as? String)
            #expect(try await env.call(.post, "/v1/invitations/\(code)/accept", as: ivy).status == .accepted)

            // A first sending claimed by a sender of the release before (its lease ahead, no attempt
            // and no `claimed_until`), through a rollout, is held too: it may be going out.
            let sending = "\(TestEnvironment.uniqueName("sam"))@example.com"
            let inFlight = try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Sam", "email": sending])
            let inFlightID = try #require(inFlight.json["id"] as? String)
            try await firstAttemptFailed(sending)
            try await env.execute(
                "UPDATE mail_outbox SET attempts = 0, last_error = NULL, next_attempt_at = now() + interval '2 minutes' WHERE lower(recipient) = lower('\(sending)')")
            let revokedInFlight = try await env.call(.post, "/v1/clients/\(inFlightID)/invitation/revoke", as: coach)
            #expect(revokedInFlight.json[path: "invitation.delivery"] as? String == "queued", "\(revokedInFlight.text)")
            #expect(try await mails(to: sending) == 1)
        }
    }

    /// A mail being sent when its code stops working (here a retry, to a server that takes the
    /// connection and says nothing) is left to its sender: deleted, it could still go out while the
    /// roster said none went. It is withdrawn: that sending ends as it ends (here it fails, when the
    /// server goes) and the mail is not tried again.
    @Test func aMailBeingSentWhenItsCodeStopsWorkingIsNotTriedAgain() async throws {
        let port = try RedisServer.freePort()
        try await InvitationsTestEnvironment.run(["SMTP_URL": "smtp://127.0.0.1:\(port)", "SMTP_TIMEOUT_MS": "120000", "ACCEPT_ROLE_WAIT_MS": "0"]) { env in
            let coach = try await env.coach()
            let address = "\(TestEnvironment.uniqueName("sam"))@example.com"
            let created = try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Sam", "email": address])
            let id = try #require(created.json["id"] as? String)
            let mail = "FROM mail_outbox WHERE lower(recipient) = lower('\(address)')"
            // The first sending finds no server there and fails at once; the retry, seconds later,
            // finds one that never answers, and is held for the whole timeout (a lease of minutes,
            // where the retry's wait was seconds).
            try await waitUntil(.seconds(20)) { try await env.count("SELECT count(*) \(mail) AND attempts >= 1") == 1 }
            var server = try LoopbackSocket.listenWithoutAnswering(port: port)
            defer { if server >= 0 { close(server) } }
            // A loaded machine may fail one more retry before the server listens: the next one is held.
            try await waitUntil(.seconds(60)) { try await env.count("SELECT count(*) \(mail) AND claimed_until > now()") == 1 }
            let attempts = try await env.count("SELECT attempts::int8 \(mail)")
            #expect(attempts >= 1)
            let revoked = try await env.call(.post, "/v1/clients/\(id)/invitation/revoke", as: coach)
            #expect(revoked.json["status"] as? String == "revoked" && revoked.json[path: "invitation.delivery"] as? String == "queued", "\(revoked.text)")
            #expect(try await env.count("SELECT count(*) \(mail) AND status = 'pending'") == 1)

            close(server)
            server = -1
            try await waitUntil(.seconds(30)) { try await env.count("SELECT count(*) \(mail) AND status = 'failed' AND attempts = \(attempts + 1)") == 1 }
            #expect(try await env.call(.get, "/v1/clients/\(id)", as: coach).json[path: "invitation.delivery"] as? String == "failed")
        }
    }

    /// The app finds the invitations to a verified address, each with a new code that works (the
    /// mailed one stops); an unverified address finds none.
    @Test func theAppFindsInvitationsToTheCallersVerifiedAddress() async throws {
        try await InvitationsTestEnvironment.run(["ACCEPT_ROLE_WAIT_MS": "0"]) { env in
            let coach = try await env.coach("Sam Strong")
            let email = "\(TestEnvironment.uniqueName("lost"))@example.com"
            let (_, mailed) = try await env.invite("Ivy", email: email, by: coach)
            let unverified = try await env.user(email: email, emailVerified: false)
            #expect(try await env.call(.get, "/v1/invitations/mine", as: unverified).code == "email_unverified")
            let ivy = try await env.user(email: email)
            let mine = try await env.call(.get, "/v1/invitations/mine", as: ivy)
            #expect(mine.status == .ok && mine.items.count == 1, "\(mine.text)")
            let code = try #require(mine.items.first?["code"] as? String)
            #expect((mine.items.first?["coach"] as? [String: Any])?["display_name"] as? String == "Sam Strong")
            #expect(try await env.call(.get, "/v1/invitations/\(mailed)").code == "invitation_not_found")
            #expect(try await env.call(.post, "/v1/invitations/\(code)/accept", as: ivy).status == .accepted)
            #expect(try await env.call(.get, "/v1/invitations/mine", as: ivy).items.isEmpty)
        }
    }

    /// An invitation sent, or accepted, while the account's deletion runs waits for it, then finds the
    /// tombstone and makes nothing: without the wait, a coach's invitation (and its mail) would be
    /// written after the deletion's statements read, and outlive the coach.
    @Test func aWriteBesideTheDeletionWaitsAndMakesNothing() async throws {
        try await InvitationsTestEnvironment.run(["ACCEPT_ROLE_WAIT_MS": "0"]) { env in
            let coach = try await env.coach()
            let invite = try await env.whileDeleting(coach.id) {
                try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Ghost", "email": "\(TestEnvironment.uniqueName("g"))@example.com"])
            }
            #expect(invite.status == .unauthorized && invite.code == "account_deleted", "\(invite.text)")
            #expect(try await env.count("SELECT count(*) FROM clients WHERE coach_id = '\(coach.id)'") == 0)

            let other = try await env.coach("Other Coach")
            let email = "\(TestEnvironment.uniqueName("jo"))@example.com"
            let (created, code) = try await env.invite("Jo", email: email, by: other)
            let jo = try await env.user(email: email)
            let accepted = try await env.whileDeleting(jo.id) { try await env.call(.post, "/v1/invitations/\(code)/accept", as: jo) }
            #expect(accepted.status == .unauthorized && accepted.code == "account_deleted", "\(accepted.text)")
            let id = try #require(created.json["id"] as? String)
            #expect(try await env.call(.get, "/v1/clients/\(id)", as: other).json["status"] as? String == "pending")
            #expect(try await env.count("SELECT count(*) FROM clients WHERE client_user_id = '\(jo.id)'") == 0)
        }
    }

    /// A deleted coach: every client unlinked, the roster gone. A deleted client: the coach's roster
    /// keeps `left` without their name, address, phone or notes.
    @Test func deletedAccountsLeaveNothingBehind() async throws {
        try await InvitationsTestEnvironment.run(["ACCEPT_ROLE_WAIT_MS": "0"]) { env in
            let coach = try await env.coach()
            let email = "\(TestEnvironment.uniqueName("del"))@example.com"
            let (created, code) = try await env.invite("Jo", email: email, by: coach, extra: ["phone": "555 0199", "notes": "private"])
            let jo = try await env.user(email: email)
            #expect(try await env.call(.post, "/v1/invitations/\(code)/accept", as: jo).status == .accepted)
            try await env.publish(UserDeleted(userID: jo.id), userID: jo.id)
            let id = try #require(created.json["id"] as? String)
            try await waitUntil(.seconds(10)) { try await env.call(.get, "/v1/clients/\(id)", as: coach).json["status"] as? String == "left" }
            let left = try await env.call(.get, "/v1/clients/\(id)", as: coach)
            #expect(left.json["name"] is NSNull && left.json["email"] is NSNull && left.json["phone"] is NSNull && left.json["notes"] is NSNull)
            // Nor the mail to the address, nor its unsubscribe links' record of it.
            #expect(try await env.count("SELECT count(*) FROM mail_outbox WHERE lower(recipient) = lower('\(email)')") == 0)
            #expect(try await env.count("SELECT count(*) FROM unsubscribe_tokens WHERE email_normalized = lower('\(email)')") == 0)

            let other = try await env.coach("Leaving Coach")
            let address = "\(TestEnvironment.uniqueName("kim"))@example.com"
            let (_, kimCode) = try await env.invite("Kim", email: address, by: other)
            let kim = try await env.user(email: address)
            #expect(try await env.call(.post, "/v1/invitations/\(kimCode)/accept", as: kim).status == .accepted)
            _ = try await env.invite("Lee", email: "\(TestEnvironment.uniqueName("lee"))@example.com", by: other)
            // A pending invitation of another coach to Kim's address stays as that coach sent it.
            let (staying, _) = try await env.invite("Kim", email: address, by: coach)
            let coachedMail = "(SELECT a.email FROM accounts a WHERE a.user_id = '\(other.id)')"
            #expect(try await env.count("SELECT count(*) FROM mail_outbox WHERE lower(reply_to) = lower(\(coachedMail))") == 2)
            try await env.publish(UserDeleted(userID: other.id), userID: other.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM clients WHERE coach_id = '\(other.id)'") == 0 }
            // The deleted coach's invitations, whose replies went to their address, are gone from the
            // outbox; the other coach's to the same address is not.
            #expect(try await env.count("SELECT count(*) FROM mail_outbox WHERE lower(recipient) = lower('\(address)')") == 1)
            #expect(try await env.count("SELECT count(*) FROM mail_outbox WHERE reply_to IS NOT NULL AND template = 'invitation' AND recipient LIKE 'lee%'") == 0)
            let stayingID = try #require(staying.json["id"] as? String)
            #expect(try await env.call(.get, "/v1/clients/\(stayingID)", as: coach).json[path: "invitation.delivery"] as? String == "sent")

            // A deleted client whose address another coach's roster still holds: that invitation,
            // and its one-click unsubscribe, stay.
            let mo = "\(TestEnvironment.uniqueName("mo"))@example.com"
            let (_, moCode) = try await env.invite("Mo", email: mo, by: coach)
            let third = try await env.coach("Third Coach")
            _ = try await env.invite("Mo", email: mo, by: third)
            let moUser = try await env.user(email: mo)
            #expect(try await env.call(.post, "/v1/invitations/\(moCode)/accept", as: moUser).status == .accepted)
            try await env.publish(UserDeleted(userID: moUser.id), userID: moUser.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM clients WHERE client_user_id = '\(moUser.id)'") == 0 }
            #expect(try await env.count("SELECT count(*) FROM mail_outbox WHERE lower(recipient) = lower('\(mo)')") == 1)
            let kept = try #require(try await env.mails(to: mo, count: 2).last)
            let link = try #require(kept.firstMatch(of: try Regex("List-Unsubscribe: <https://api.test(/v1/invitations/unsubscribe\\?token=[A-Za-z0-9_-]+)>")))
            let unsubscribed = try await env.call(
                .post, String(try #require(link.output[1].substring)), raw: ByteBuffer(string: "List-Unsubscribe=One-Click"),
                headers: [.contentType: "application/x-www-form-urlencoded"])
            #expect(unsubscribed.status == .ok, "\(unsubscribed.text)")
            #expect(try await env.call(.get, "/v1/coach", as: kim).code == "no_coach")
            // The event leaves through the outbox relay, a moment after the handler's commit.
            try await waitUntil(.seconds(10)) { try await env.events("client.unlinked").contains { $0["reason"] as? String == "coach_deleted" } }
            #expect(try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(other.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM invitation_sends WHERE coach_id = '\(other.id)'") == 0, "not even the sends counted")
            // The deleted coach's token, still within its lifetime: refused as deleted (not a 503 for
            // an account not known yet, after waiting for it), and it leaves no row behind.
            let refused = try await env.call(.post, "/v1/clients", as: other, json: ["name": "Ghost", "email": "\(TestEnvironment.uniqueName("g"))@example.com"])
            #expect(refused.status == .unauthorized && refused.code == "account_deleted", "\(refused.text)")
            #expect(try await env.call(.get, "/v1/invitations/mine", as: other).code == "account_deleted")
            // A late `user.registered` does not bring the account back.
            try await env.publish(UserRegistered(userID: other.id, email: "late@example.com", displayName: "Late", provider: "email"), userID: other.id)
            // Published after it: once this one is in, the late one has been handled.
            let after = UUID()
            try await env.publish(UserRegistered(userID: after, email: "\(TestEnvironment.uniqueName("after"))@example.com", displayName: nil, provider: "email"), userID: after)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(after)'") == 1 }
            #expect(try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(other.id)'") == 0)
            #expect(try await env.count("SELECT count(*) FROM clients WHERE coach_id = '\(other.id)'") == 0)
        }
    }

    /// The roster follows auth's roles: a coach an admin demoted keeps no client and no open
    /// invitation, and a client who took `coach` before auth granted `client` leaves their coach.
    @Test func rosterFollowsTheRolesAuthGives() async throws {
        try await InvitationsTestEnvironment.run(["ACCEPT_ROLE_WAIT_MS": "0"]) { env in
            let coach = try await env.coach("Demoted Coach")
            let (accepted, ana) = try await env.acceptedClient("Ana", by: coach)
            let pendingAddress = "\(TestEnvironment.uniqueName("ben"))@example.com"
            let (pending, pendingCode) = try await env.invite("Ben", email: pendingAddress, by: coach)
            let ben = try await env.user(email: pendingAddress)

            try await env.publish(UserRolesChanged(userID: coach.id, roles: [.user], added: [], removed: [.coach]), userID: coach.id)
            let acceptedID = try #require(accepted.json["id"] as? String)
            let pendingID = try #require(pending.json["id"] as? String)
            try await waitUntil(.seconds(10)) {
                try await env.count(
                    "SELECT count(*) FROM clients WHERE (id = '\(acceptedID)' AND status = 'left') OR (id = '\(pendingID)' AND status = 'revoked')") == 2
            }
            try await waitUntil(.seconds(10)) {
                try await env.events("client.unlinked").contains {
                    $0["reason"] as? String == "coach_role_removed" && ($0["client_id"] as? String)?.lowercased() == ana.path
                }
            }
            #expect(try await env.call(.get, "/v1/coach", as: ana).code == "no_coach")
            #expect(try await env.call(.post, "/v1/invitations/\(pendingCode)/accept", as: ben).code == "invitation_revoked")
            // The demoted coach's token still says coach for minutes: it opens nothing again.
            let resent = try await env.call(.post, "/v1/clients/\(pendingID)/invitation/resend", as: coach)
            #expect(resent.status == .forbidden, "\(resent.text)")
            let created = try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Dee", "email": "\(TestEnvironment.uniqueName("dee"))@example.com"])
            #expect(created.status == .forbidden, "\(created.text)")
            // An invitation made beside the demotion and left pending is refused as revoked.
            try await env.execute("UPDATE clients SET status = 'pending' WHERE id = '\(pendingID)'")
            #expect(try await env.call(.post, "/v1/invitations/\(pendingCode)/accept", as: ben).code == "invitation_revoked")

            // Accepted, then `coach` taken before auth granted `client` (auth refuses that acceptance).
            let other = try await env.coach("Other Coach")
            let (_, carl) = try await env.acceptedClient("Carl", by: other)
            try await env.publish(UserRolesChanged(userID: carl.id, roles: [.user, .coach], added: [.coach], removed: []), userID: carl.id)
            try await waitUntil(.seconds(10)) {
                try await env.count("SELECT count(*) FROM clients WHERE client_user_id = '\(carl.id)' AND status = 'accepted'") == 0
            }
            try await waitUntil(.seconds(10)) {
                try await env.events("client.unlinked").contains {
                    $0["reason"] as? String == "became_coach" && ($0["client_id"] as? String)?.lowercased() == carl.path
                }
            }
            // The other coach keeps their roster entry as `left`, as for any client who leaves.
            let roster = try await env.call(.get, "/v1/clients?status=left", as: other)
            #expect((roster.json["items"] as? [[String: Any]])?.count == 1, "\(roster.text)")
        }
    }

    /// `coach` granted while an acceptance is under way (read as no coach before its transaction): the
    /// acceptance, once it holds the person, finds the role and is refused; no link is made that
    /// would make a coach another coach's client.
    @Test func anAcceptanceBesideAGrantOfCoachIsRefused() async throws {
        try await InvitationsTestEnvironment.run(["ACCEPT_ROLE_WAIT_MS": "0"]) { env in
            let coach = try await env.coach("Early Coach")
            let address = "\(TestEnvironment.uniqueName("dana"))@example.com"
            let (invited, code) = try await env.invite("Dana", email: address, by: coach)
            let dana = try await env.user(email: address)
            let id = try #require(invited.json["id"] as? String)
            let (started, starting) = AsyncStream<Task<APIReply, any Error>>.makeStream()
            // The invitation's row held, as a write beside the acceptance would: the acceptance has
            // read the account and waits for it.
            try await env.inOpenTransaction(["SELECT 1 FROM clients WHERE id = '\(id)' FOR UPDATE"]) {
                starting.yield(Task { try await env.call(.post, "/v1/invitations/\(code)/accept", as: dana) })
                starting.finish()
                try await env.awaitLockWait()
                try await env.publish(UserRolesChanged(userID: dana.id, roles: [.user, .coach], added: [.coach], removed: []), userID: dana.id)
                try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(dana.id)' AND 'coach' = ANY (roles)") == 1 }
            }
            for await task in started {
                let answer = try await task.value
                #expect(answer.status == .conflict && answer.code == "role_conflict", "\(answer.text)")
            }
            #expect(try await env.count("SELECT count(*) FROM clients WHERE client_user_id = '\(dana.id)' AND status = 'accepted'") == 0)
        }
    }

    /// An account taken over by its address's owner (`user.password_changed`, `disowned`): the roster
    /// the person who signed it up built is gone, its clients unlinked; the account stays known.
    @Test func aDisownedCoachAccountLosesItsRoster() async throws {
        try await InvitationsTestEnvironment.run(["ACCEPT_ROLE_WAIT_MS": "0"]) { env in
            let squatter = try await env.coach("Squatter")
            let (_, mo) = try await env.acceptedClient("Mo", by: squatter)
            try await env.publish(UserPasswordChanged(userID: squatter.id, method: .disowned), userID: squatter.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM clients WHERE coach_id = '\(squatter.id)'") == 0 }
            #expect(try await env.call(.get, "/v1/coach", as: mo).code == "no_coach")
            try await waitUntil(.seconds(10)) { try await env.events("client.unlinked").contains { $0["reason"] as? String == "coach_deleted" } }
            #expect(try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(squatter.id)'") == 1)
        }
    }

    @Test func likelyTyposOfCommonDomainsAreNamed() {
        #expect(EmailSuggestion.suggestion(for: "a@gmial.com") == "a@gmail.com")
        #expect(EmailSuggestion.suggestion(for: "a@yaho.com") == "a@yahoo.com")
        #expect(EmailSuggestion.suggestion(for: "a@hotmial.com") == "a@hotmail.com")
        #expect(EmailSuggestion.suggestion(for: "a@gmail.con") == "a@gmail.com")
        #expect(EmailSuggestion.suggestion(for: "a@outlok.com") == "a@outlook.com")
        for fine in ["a@gmail.com", "a@example.com", "a@gmx.at", "a@company.io", "a@icloud.com", "a@uni-heidelberg.de"] {
            #expect(EmailSuggestion.suggestion(for: fine) == nil, "\(fine)")
        }
    }

    @Test func invitationCodesInPathsAreNeverLogged() {
        #expect(RequestLog.redacted("/v1/invitations/SECRETcode123/accept") == "/v1/invitations/[redacted]/accept")
        #expect(RequestLog.redacted("/v1/invitations/SECRETcode123") == "/v1/invitations/[redacted]")
        #expect(RequestLog.redacted("/v1/invitations/mine") == "/v1/invitations/mine")
        #expect(RequestLog.redacted("/v1/invitations/unsubscribe") == "/v1/invitations/unsubscribe")
        #expect(RequestLog.redacted("/v1/clients/abc") == "/v1/clients/abc")
    }
}
