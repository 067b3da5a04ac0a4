import Foundation
import HTTPTypes
@testable import Invitations
import Models
import Testing
import TestSupport

/// An invitation is accepted by the address it was sent to, once that address is proven, and by an
/// Apple private-relay address only when Apple vouched for it; a look-alike address is no address.
@Suite struct ProvenAddressTests {
    /// A coach cannot invite a look-alike spelling of an address: it would be mailed to a spelling
    /// that bounces, and match the real address's account.
    @Test func anInvitationToALookAlikeAddressIsRefused() async throws {
        try await InvitationsTestEnvironment.run { env in
            let coach = try await env.coach()
            let local = TestEnvironment.uniqueName("kate")
            for lookAlike in ["\u{212A}" + local.dropFirst() + "@corp.test", "\(local)@\u{FF43}orp.test", "\u{FB01}\(local)@corp.test"] {
                let refused = try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Kate", "email": lookAlike])
                #expect(refused.status == .badRequest && refused.code == "invalid_email", "\(lookAlike): \(refused.text)")
                #expect(refused.fieldErrors == ["email"])
            }
            // Every field's problem comes with it.
            let both = try await env.call(.post, "/v1/clients", as: coach, json: ["name": "", "email": "\u{212A}" + local.dropFirst() + "@corp.test"])
            #expect(both.code == "invalid_email" && Set(both.fieldErrors) == ["email", "name"], "\(both.text)")

            // The real address, in capitals and with an internationalised domain, is invited and
            // mailed in its ASCII form; a change to a look-alike is refused too.
            let created = try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Kate", "email": "\(local.uppercased())@B\u{FC}cher.de"])
            #expect(created.status == .created && created.json["email"] as? String == "\(local.uppercased())@xn--bcher-kva.de", "\(created.text)")
            let mail = try #require(try await env.mails(to: "\(local)@xn--bcher-kva.de").first)
            #expect(mail.contains("To: \(local.uppercased())@xn--bcher-kva.de"))
            let id = try #require(created.json["id"] as? String)
            let again = try await env.call(.post, "/v1/clients", as: coach, json: ["name": "Kate", "email": "\(local)@xn--bcher-kva.de"])
            #expect(again.code == "client_exists", "\(again.text)")
            let patched = try await env.call(.patch, "/v1/clients/\(id)", as: coach, json: ["email": "\u{212A}" + local.dropFirst() + "@corp.test"])
            #expect(patched.status == .badRequest && patched.code == "invalid_email", "\(patched.text)")
        }
    }

    /// Anyone can register the invited address without holding it: until auth says it is proven, a
    /// forwarded code is not enough.
    @Test func acceptingNeedsAVerifiedAddress() async throws {
        try await InvitationsTestEnvironment.run(["ACCEPT_ROLE_WAIT_MS": "0"]) { env in
            let coach = try await env.coach()
            let email = "\(TestEnvironment.uniqueName("v"))@example.com"
            let (_, code) = try await env.invite("Vic", email: email, by: coach)
            let squatter = try await env.user(email: email, emailVerified: false)
            let refused = try await env.call(.post, "/v1/invitations/\(code)/accept", as: squatter)
            #expect(refused.status == .forbidden && refused.code == "email_unverified", "\(refused.text)")
            #expect(refused.headers[.contentType] == "application/problem+json")
            #expect(try await env.call(.get, "/v1/invitations/\(code)").json["status"] as? String == "pending")

            // Proven (auth's `user.email_verified`): the same code is accepted.
            try await env.publish(UserEmailVerified(userID: squatter.id, email: email), userID: squatter.id)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM accounts WHERE user_id = '\(squatter.id)' AND email_verified") == 1 }
            let accepted = try await env.call(.post, "/v1/invitations/\(code)/accept", as: squatter)
            #expect(accepted.status == .accepted || accepted.status == .ok, "\(accepted.text)")
        }
    }

    /// The relay exception is Apple's word that the relay address is the person's: an address typed
    /// at sign-up (even proven by a mail the relay forwarded) gets none.
    @Test func onlyAnAppleVouchedRelayAddressAcceptsAnotherAddressesInvitation() async throws {
        try await InvitationsTestEnvironment.run(["ACCEPT_ROLE_WAIT_MS": "0"]) { env in
            let coach = try await env.coach()
            let email = "\(TestEnvironment.uniqueName("r"))@example.com"
            let (created, code) = try await env.invite("Rui", email: email, by: coach)
            let typed = try await env.user(email: "\(TestEnvironment.uniqueName("x"))@privaterelay.appleid.com")
            let refused = try await env.call(.post, "/v1/invitations/\(code)/accept", as: typed)
            #expect(refused.status == .conflict && refused.code == "email_mismatch", "\(refused.text)")
            let unvouched = try await env.user(email: "\(TestEnvironment.uniqueName("x"))@privaterelay.appleid.com", provider: "apple")
            #expect(try await env.call(.post, "/v1/invitations/\(code)/accept", as: unvouched).code == "email_mismatch")

            let vouched = try await env.user(email: "\(TestEnvironment.uniqueName("x"))@privaterelay.appleid.com", provider: "apple", vouchedBy: "apple")
            let accepted = try await env.call(.post, "/v1/invitations/\(code)/accept", as: vouched)
            #expect(accepted.status == .accepted || accepted.status == .ok, "\(accepted.text)")
            let id = try #require(created.json["id"] as? String)
            #expect(try await env.call(.get, "/v1/clients/\(id)", as: coach).json["accepted_via_relay"] as? Bool == true)
        }
    }
}
