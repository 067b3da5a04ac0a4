import Foundation
import HTTPTypes
import Models
import Testing
import TestSupport

/// Space invitations by address wait for auth's word that the address is proven, whichever way the
/// account was made; a look-alike address is no address.
@Suite struct ProvenAddressSpaceTests {
    typealias Env = EntitlementsTestEnvironment

    /// The former holder of a company address still has it on an Apple ID, which Apple marks
    /// verified: registered with Apple, unvouched by auth, they join nothing until
    /// `user.email_verified`.
    @Test func aProviderSignUpWithAnUnvouchedAddressJoinsNoSpaceUntilVerified() async throws {
        try await Env.run { env in
            let owner = try await env.user()
            try await env.grant(owner, tier: "team")
            let created = try await env.call(.post, "/v1/spaces", as: owner, json: ["name": "Launch"])
            let id = try #require(created.json["id"] as? String, "\(created.text)")
            let members = "/v1/spaces/\(id)/members"
            let address = "\(TestEnvironment.uniqueName("new.hire"))@corp.test"
            let invited = try await env.call(.post, members, as: owner, json: ["email": address, "permission": "editor"])
            #expect(invited.status == .created && invited.json["status"] as? String == "pending", "\(invited.text)")

            let former = try await env.user(email: address, provider: "apple", verified: false)
            #expect(try await env.call(.get, "/v1/spaces/\(id)", as: former).status == .notFound)
            #expect(try await env.count("SELECT count(*) FROM space_invitations WHERE space_id = '\(id)' AND email_normalized = '\(address)'") == 1)
            #expect(try await env.count("SELECT count(*) FROM customers WHERE user_id = '\(former.id)' AND email_verified") == 0)
            let google = try await env.user(email: "\(TestEnvironment.uniqueName("g"))@corp.test", provider: "google", verified: false)
            #expect(try await env.count("SELECT count(*) FROM customers WHERE user_id = '\(google.id)' AND email_verified") == 0)

            // Auth proves the address (its owner followed the mailed link): the invitation is theirs.
            try await env.publish(UserEmailVerified(userID: former.id, email: address), userID: former.id)
            try await waitUntil(.seconds(15)) {
                if try await env.call(.get, "/v1/spaces/\(id)", as: former).status == .ok { return true }
                return try await env.call(.post, "/v1/spaces/\(id)/invitation/accept", as: former).status == .ok
            }
            #expect(try await env.call(.get, "/v1/spaces/\(id)", as: former).json["permission"] as? String == "editor")
        }
    }

    /// Adding a member by a look-alike spelling of an address is refused, not matched to the address.
    @Test func aLookAlikeAddressIsRefused() async throws {
        try await Env.run { env in
            let owner = try await env.user()
            try await env.grant(owner, tier: "team")
            let created = try await env.call(.post, "/v1/spaces", as: owner, json: ["name": "Launch"])
            let id = try #require(created.json["id"] as? String, "\(created.text)")
            let local = TestEnvironment.uniqueName("kate")
            for lookAlike in ["\u{212A}" + local.dropFirst() + "@corp.test", "\(local)@\u{FF43}orp.test", "stra\u{DF}e\(local)@corp.test"] {
                let refused = try await env.call(.post, "/v1/spaces/\(id)/members", as: owner, json: ["email": lookAlike, "permission": "viewer"])
                #expect(refused.status == .badRequest && refused.code == "invalid_email" && refused.fieldErrors == ["email"], "\(lookAlike): \(refused.text)")
            }
            let idn = try await env.call(.post, "/v1/spaces/\(id)/members", as: owner, json: ["email": "\(local)@B\u{FC}cher.de", "permission": "viewer"])
            #expect(idn.status == .created && idn.json["email"] as? String == "\(local)@xn--bcher-kva.de", "\(idn.text)")
        }
    }
}
