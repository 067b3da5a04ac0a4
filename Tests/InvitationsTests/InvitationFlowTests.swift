import Foundation
import HTTPTypes
@testable import Invitations
import Models
import NIOCore
import ServiceKit
import ServiceKitCore
import ServiceKitHTTP
import Testing
import TestSupport

/// The coach → client flow through HTTP, with the mail read back from the SMTP sink.
@Suite struct InvitationFlowTests {
    /// A coach adds a client; the mail arrives with everything in it; the link previews without being
    /// used up; the client accepts, auth grants `client`, the roster follows; the client leaves.
    @Test func aCoachInvitesAndTheClientAcceptsFromTheMailedLink() async throws {
        try await InvitationsTestEnvironment.run { env in
            let coach = try await env.coach("Sam Strong")
            let email = "\(TestEnvironment.uniqueName("ana"))@example.com"
            let (created, code) = try await env.invite("Ana Lima", email: email, by: coach, extra: ["phone": "+44 20 7946 0958", "notes": "Knee injury\nno squats"])
            #expect(created.json["name"] as? String == "Ana Lima" && created.json["status"] as? String == "pending")
            #expect(created.json["phone"] as? String == "+44 20 7946 0958")
            #expect(created.json[path: "invitation.resend_count"] as? Int == 0)
            #expect(created.json[path: "invitation.delivery"] as? String == "queued")
            let expires = try #require(created.json[path: "invitation.expires_at"] as? String)
            let clientID = try #require(created.json["id"] as? String)

            let mail = try #require(try await env.mails(to: email).first)
            #expect(mail.contains("Subject: You're invited to Sam Strong's program"))
            #expect(mail.contains("Reply-To: \(coach.email)"))
            #expect(mail.contains("List-Unsubscribe: <https://api.test/v1/invitations/unsubscribe?token="))
            #expect(mail.contains("List-Unsubscribe-Post: List-Unsubscribe=One-Click"))
            #expect(mail.contains("pfa://invite?code=\(code)"))
            #expect(mail.contains("https://apps.apple.com/app/id123"))
            #expect(mail.contains("Hello Ana Lima,"))
            let day = DisplayDate.day(try #require(try? Date(expires, strategy: .iso8601)))
            #expect(mail.contains("works until \(day)"), "\(day)")
            try await waitUntil(.seconds(10)) {
                try await env.call(.get, "/v1/clients/\(clientID)", as: coach).json[path: "invitation.delivery"] as? String == "sent"
            }

            // The link, opened by a mail scanner and then by the person: nothing is used up.
            for _ in 0..<2 {
                let preview = try await env.call(.get, "/v1/invitations/\(code)")
                #expect(preview.status == .ok, "\(preview.text)")
                #expect(preview.json[path: "coach.display_name"] as? String == "Sam Strong")
                #expect(preview.json["client_name"] as? String == "Ana Lima" && preview.json["status"] as? String == "pending")
            }
            #expect(try await env.call(.get, "/v1/invitations/not-a-code-at-all-000000000").code == "invitation_not_found")

            // The code is stored only as its hash.
            #expect(try await env.count("SELECT count(*) FROM clients c WHERE row_to_json(c)::text LIKE '%\(code)%'") == 0)
            #expect(try await env.count("SELECT count(*) FROM unsubscribe_tokens WHERE encode(token_hash, 'hex') = '\(code)'") == 0)

            let ana = try await env.user("Ana", email: email.uppercased())
            let auth = env.actAsAuth(granting: ana)
            let accepted = try await env.call(.post, "/v1/invitations/\(code)/accept", as: ana)
            try await auth.value
            #expect(accepted.status == .ok, "\(accepted.text)")
            #expect(accepted.json["role"] as? String == "granted")
            #expect((accepted.json["client_id"] as? String)?.lowercased() == ana.path)
            // The coach's roster entry, which training's first reads wait for (`roster_entry_id=`).
            #expect(accepted.json["roster_entry_id"] as? String == clientID.lowercased())
            #expect(accepted.json[path: "coach.display_name"] as? String == "Sam Strong")
            let event = try #require(try await env.events("invitation.accepted").first)
            #expect((event["coach_id"] as? String)?.lowercased() == coach.path && (event["client_id"] as? String)?.lowercased() == ana.path)
            // Ana's acceptance sent again (its answer lost on the way): the same answer, nothing done
            // twice. Anyone else holding the code: used.
            let again = try await env.call(.post, "/v1/invitations/\(code)/accept", as: ana)
            #expect(again.status == .ok && again.json["role"] as? String == "granted", "\(again.text)")
            #expect((again.json["client_id"] as? String)?.lowercased() == ana.path && again.json[path: "coach.display_name"] as? String == "Sam Strong")
            #expect(again.json["roster_entry_id"] as? String == clientID.lowercased())
            #expect(try await env.call(.post, "/v1/invitations/\(code)/accept", as: try await env.user()).code == "invitation_used")
            try await Task.sleep(for: .milliseconds(300))
            #expect(try await env.events("invitation.accepted").count == 1)
            // An old link shows no more of the person.
            let afterwards = try await env.call(.get, "/v1/invitations/\(code)")
            #expect(afterwards.json["status"] as? String == "accepted" && afterwards.json["client_name"] is NSNull)

            // The roster: accepted, and the last sign-in from auth's event.
            try await env.publish(UserSignedIn(userID: ana.id, sessionID: UUID(), provider: "password"), userID: ana.id)
            try await waitUntil(.seconds(10)) {
                try await env.call(.get, "/v1/clients?status=accepted", as: coach).items.first?["last_sign_in_at"] is String
            }
            let roster = try await env.call(.get, "/v1/clients", as: coach)
            #expect(roster.items.count == 1 && roster.items[0]["status"] as? String == "accepted")
            #expect(roster.items[0]["accepted_at"] is String && roster.json["next_cursor"] is NSNull)
            #expect(try await env.call(.get, "/v1/clients?status=pending", as: coach).items.isEmpty)

            let mine = try await env.call(.get, "/v1/coach", as: ana)
            #expect(mine.status == .ok && (mine.json[path: "coach.id"] as? String)?.lowercased() == coach.path && mine.json["since"] is String)
            #expect(try await env.call(.get, "/v1/coach", as: coach).code == "no_coach")

            // Leaving: the roster says so, and auth is told (it removes `client`).
            #expect(try await env.call(.delete, "/v1/coach", as: ana).status == .noContent)
            #expect(try await env.call(.delete, "/v1/coach", as: ana).code == "no_coach")
            #expect(try await env.call(.get, "/v1/clients/\(clientID)", as: coach).json["status"] as? String == "left")
            try await waitUntil(.seconds(10)) { try await !env.events("client.unlinked").isEmpty }
            let unlinked = try #require(try await env.events("client.unlinked").first)
            #expect(unlinked["reason"] as? String == "left" && unlinked["has_other_coach"] as? Bool == false)
        }
    }

    /// The acceptance's checks answer in their order, and a refusal leaves the invitation usable.
    @Test func acceptanceRefusalsComeInTheirOrder() async throws {
        try await InvitationsTestEnvironment.run(["ACCEPT_ROLE_WAIT_MS": "200"]) { env in
            let coach = try await env.coach()
            let email = "\(TestEnvironment.uniqueName("c"))@example.com"
            let (created, code) = try await env.invite("Cleo", email: email, by: coach)
            let id = try #require(created.json["id"] as? String)
            let invited = try await env.user(email: email)
            let stranger = try await env.user()
            let otherCoach = try await env.coach("Other")

            #expect(try await env.call(.post, "/v1/invitations/\(code)/accept").status == .unauthorized)
            #expect(try await env.call(.post, "/v1/invitations/\(code)x/accept", as: invited).code == "invitation_not_found")
            #expect(try await env.call(.post, "/v1/invitations/\(code)/accept", as: otherCoach).code == "role_conflict")
            let mismatch = try await env.call(.post, "/v1/invitations/\(code)/accept", as: stranger)
            #expect(mismatch.status == .conflict && mismatch.code == "email_mismatch")
            #expect(try await env.call(.post, "/v1/invitations/\(code)/accept", as: invited, json: ["switch_coach": "yes"]).status == .badRequest)

            // Expired (time moved by moving the expiry), then revoked: 410 each; a resend gives a new
            // code and the old one is unknown from then on.
            try await env.execute("UPDATE clients SET expires_at = now() - interval '1 minute' WHERE id = '\(id)'")
            let expired = try await env.call(.post, "/v1/invitations/\(code)/accept", as: invited)
            #expect(expired.status == .gone && expired.code == "invitation_expired")
            #expect(try await env.call(.get, "/v1/clients?status=expired", as: coach).ids == [id])
            #expect(try await env.call(.post, "/v1/clients/\(id)/invitation/revoke", as: coach).json["status"] as? String == "revoked")
            #expect(try await env.call(.post, "/v1/invitations/\(code)/accept", as: invited).code == "invitation_revoked")
            let resent = try await env.call(.post, "/v1/clients/\(id)/invitation/resend", as: coach)
            #expect(resent.status == .ok && resent.json["status"] as? String == "pending" && resent.json[path: "invitation.resend_count"] as? Int == 1)
            let fresh = try await env.code(mailedTo: email, count: 2)
            #expect(fresh != code)
            #expect(try await env.call(.post, "/v1/invitations/\(code)/accept", as: invited).code == "invitation_not_found")

            // Nobody grants `client` here (no auth): the response comes after the wait, as 202 pending.
            let accepted = try await env.call(.post, "/v1/invitations/\(fresh)/accept", as: invited)
            #expect(accepted.status == .accepted && accepted.json["role"] as? String == "pending", "\(accepted.text)")
            #expect(try await env.call(.post, "/v1/clients/\(id)/invitation/revoke", as: coach).code == "invitation_used")
            #expect(try await env.call(.post, "/v1/clients/\(id)/invitation/resend", as: coach).code == "invitation_used")

            // Another coach's invitation: already has a coach, unless switching, which unlinks the first.
            let (_, second) = try await env.invite("Cleo", email: email, by: otherCoach)
            let again = try await env.call(.post, "/v1/invitations/\(second)/accept", as: invited)
            #expect(again.code == "already_has_coach", "\(again.text)")
            let switched = try await env.call(.post, "/v1/invitations/\(second)/accept", as: invited, json: ["switch_coach": true])
            #expect(switched.status == .accepted || switched.status == .ok, "\(switched.text)")
            #expect(try await env.call(.get, "/v1/clients/\(id)", as: coach).json["status"] as? String == "left")
            try await waitUntil(.seconds(10)) { try await env.events("client.unlinked").contains { $0["reason"] as? String == "switched" } }
            #expect(try await env.events("client.unlinked").first { $0["reason"] as? String == "switched" }?["has_other_coach"] as? Bool == true)
        }
    }

    /// Holding the mailed code is enough for an Apple private-relay address: the roster marks it, and
    /// the invited address is told.
    @Test func aPrivateRelayAccountAcceptsWithTheCodeAndTheInvitedAddressIsTold() async throws {
        try await InvitationsTestEnvironment.run(["ACCEPT_ROLE_WAIT_MS": "100"]) { env in
            let coach = try await env.coach()
            let email = "\(TestEnvironment.uniqueName("r"))@example.com"
            let (created, code) = try await env.invite("Rui", email: email, by: coach)
            let relay = try await env.user(email: "\(TestEnvironment.uniqueName("x"))@privaterelay.appleid.com", provider: "apple", vouchedBy: "apple")
            #expect(try await env.call(.post, "/v1/invitations/\(code)/accept", as: relay).status == .accepted)
            let id = try #require(created.json["id"] as? String)
            #expect(try await env.call(.get, "/v1/clients/\(id)", as: coach).json["accepted_via_relay"] as? Bool == true)
            let notice = try await env.mails(to: email, count: 2).last!
            #expect(notice.contains("Subject: Your invitation to Sam Strong's program was accepted"))
        }
    }

    /// Two accounts race to accept one code twenty times over: exactly one wins, once. An acceptance racing
    /// a resend or a revoke never succeeds together with it. Six resends at once with four mails
    /// already sent today: one more is sent, five are refused.
    @Test func racesHaveOneWinner() async throws {
        try await InvitationsTestEnvironment.run(["ACCEPT_ROLE_WAIT_MS": "0"]) { env in
            let coach = try await env.coach()
            let email = "\(TestEnvironment.uniqueName("race"))@example.com"
            let (_, code) = try await env.invite("Race", email: email, by: coach)
            let invited = try await env.user(email: email)
            let relay = try await env.user(email: "\(TestEnvironment.uniqueName("x"))@privaterelay.appleid.com", provider: "apple", vouchedBy: "apple")
            let statuses = try await withThrowingTaskGroup(of: (Bool, HTTPResponse.Status).self) { group in
                for index in 0..<20 {
                    group.addTask { (index % 2 == 0, try await env.concurrentCall(.post, "/v1/invitations/\(code)/accept", as: index % 2 == 0 ? invited : relay)) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            // The winner's other attempts get its answer again (a retry of its own acceptance); the
            // other account's are refused; one acceptance happened.
            let won = statuses.filter { $0.1 == .ok || $0.1 == .accepted }
            #expect(Set(won.map(\.0)).count == 1 && won.count == 10, "\(statuses)")
            #expect(statuses.filter { $0.1 == .conflict }.count == 10, "\(statuses)")
            try await waitUntil(.seconds(10)) { try await env.events("invitation.accepted").count >= 1 }
            try await Task.sleep(for: .milliseconds(300))
            #expect(try await env.events("invitation.accepted").count == 1)

            for (round, other) in ["resend", "revoke", "resend", "revoke"].enumerated() {
                let address = "\(TestEnvironment.uniqueName("r\(round)"))@example.com"
                let (created, code) = try await env.invite("R", email: address, by: coach)
                let id = try #require(created.json["id"] as? String)
                let person = try await env.user(email: address)
                async let accept = env.concurrentCall(.post, "/v1/invitations/\(code)/accept", as: person)
                async let change = env.concurrentCall(.post, "/v1/clients/\(id)/invitation/\(other)", as: coach)
                let (accepted, changed) = try await (accept, change)
                let acceptWon = accepted == .ok || accepted == .accepted
                #expect(acceptWon != (changed == .ok), "\(other): accept \(accepted), \(other) \(changed)")
            }

            let address = "\(TestEnvironment.uniqueName("limit"))@example.com"
            let (created, _) = try await env.invite("L", email: address, by: coach)
            let id = try #require(created.json["id"] as? String)
            for _ in 0..<3 { #expect(try await env.call(.post, "/v1/clients/\(id)/invitation/resend", as: coach).status == .ok) }
            let resends = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for _ in 0..<6 { group.addTask { try await env.concurrentCall(.post, "/v1/clients/\(id)/invitation/resend", as: coach) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(resends.filter { $0 == .ok }.count == 1 && resends.filter { $0 == .tooManyRequests }.count == 5, "\(resends)")
            let limited = try await env.call(.post, "/v1/clients/\(id)/invitation/resend", as: coach)
            #expect(limited.code == "resend_limit" && Int(limited.headers[.retryAfter] ?? "") ?? 0 > 0)
            // Five mails were sent for it (each resend drops the one before if it had not gone out yet).
            #expect(try await env.count("SELECT count(*) FROM invitation_sends WHERE client_id = '\(id)'") == 5)
            #expect(try await env.call(.get, "/v1/clients/\(id)", as: coach).json[path: "invitation.resend_count"] as? Int == 4)
            // Removing the client and adding the address again does not start the count afresh.
            #expect(try await env.call(.delete, "/v1/clients/\(id)", as: coach).status == .noContent)
            let again = try await env.call(.post, "/v1/clients", as: coach, json: ["name": "L", "email": address.uppercased()])
            #expect(again.status == .tooManyRequests && again.code == "resend_limit", "\(again.text)")
            #expect(try await env.count("SELECT count(*) FROM clients WHERE coach_id = '\(coach.id)' AND email_normalized = lower('\(address)')") == 0)
            // Another coach's mails to the address are theirs to count.
            let other = try await env.coach("Other Coach")
            #expect(try await env.call(.post, "/v1/clients", as: other, json: ["name": "L", "email": address]).status == .created)
        }
    }
}
