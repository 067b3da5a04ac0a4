@testable import Auth
import Foundation
import HTTPTypes
import Models
import ServiceKit
import ServiceKitCore
import ServiceKitRedis
import Testing
import TestSupport

/// One address, one account: a look-alike spelling of an address is refused at every entry, never
/// stored as (or mailed in place of) the address it imitates.
@Suite struct CanonicalEmailTests {
    /// KELVIN SIGN lowercases to `k`: accepted, it would take `kate@…` from Kate and send her mail
    /// to a spelling that bounces.
    @Test func aKelvinSignSignUpIsRefusedAndTheRealKateKeepsHerAddress() async throws {
        try await AuthTestEnvironment.run { env in
            let local = TestEnvironment.uniqueName("kate")
            let kelvin = "\u{212A}" + local.dropFirst() + "@corp.test"
            let refused = try await env.call(.post, "/v1/auth/signup", json: ["email": kelvin, "password": "correct horse battery"])
            #expect(refused.status == .badRequest && refused.code == "invalid_email", "\(refused.text)")
            #expect(refused.fieldErrors == ["email"])
            #expect(refused.headers[.contentType] == "application/problem+json")
            let fullwidth = try await env.call(.post, "/v1/auth/signup", json: ["email": "\(local)@\u{FF43}orp.test", "password": "correct horse battery"])
            #expect(fullwidth.code == "invalid_email", "\(fullwidth.text)")
            let sharpS = try await env.call(.post, "/v1/auth/signup", json: ["email": "stra\u{DF}e-\(local)@corp.test", "password": "correct horse battery"])
            #expect(sharpS.code == "invalid_email", "\(sharpS.text)")

            // The real Kate: signs up, gets her mail, signs in; the look-alike reaches nothing.
            let kate = try await env.signUp("\(local)@corp.test")
            let mail = try #require(try await env.mails(to: kate.email).first)
            #expect(mail.contains("To: \(local)@corp.test"))
            #expect(try await env.logIn(kate.email, kate.password).status == .ok)
            #expect(try await env.logIn(kelvin, kate.password).code == "invalid_credentials")
            let forgot = try await env.call(.post, "/v1/auth/password/forgot", json: ["email": kelvin])
            #expect(forgot.status == .badRequest && forgot.code == "invalid_email", "\(forgot.text)")
            let stored = try await env.query { client in
                var rows: [String] = []
                for try await (email, normalized) in try await client.query(
                    "SELECT email, email_normalized FROM users WHERE email_normalized LIKE \("%" + local.dropFirst() + "@corp.test")", logger: TestEnvironment.logger
                )
                .decode((String, String).self) {
                    rows.append(email + " " + normalized)
                }
                return rows
            }
            #expect(stored == ["\(local)@corp.test \(local)@corp.test"])
        }
    }

    /// Case is no look-alike: the address is kept as typed (its domain lowercased), found in any case.
    @Test func caseDifferencesAreOneAddress() async throws {
        try await AuthTestEnvironment.run { env in
            let local = TestEnvironment.uniqueName("Alice")
            let reply = try await env.call(.post, "/v1/auth/signup", json: ["email": " \(local)@Example.COM ", "password": "correct horse battery"])
            #expect(reply.status == .created, "\(reply.text)")
            #expect(reply.json[path: "user.email"] as? String == "\(local)@example.com")
            #expect(try await env.logIn("\(local.uppercased())@EXAMPLE.com", "correct horse battery").status == .ok)
            let again = try await env.call(.post, "/v1/auth/signup", json: ["email": "\(local.lowercased())@example.com", "password": "correct horse battery"])
            #expect(again.code == "email_taken", "\(again.text)")
        }
    }

    /// An internationalised domain is stored, compared and mailed as its IDNA ASCII form.
    @Test func anIDNDomainIsStoredAsItsASCIIForm() async throws {
        try await AuthTestEnvironment.run { env in
            let local = TestEnvironment.uniqueName("kate")
            let reply = try await env.call(.post, "/v1/auth/signup", json: ["email": "\(local)@b\u{FC}cher.de", "password": "correct horse battery"])
            #expect(reply.status == .created, "\(reply.text)")
            #expect(reply.json[path: "user.email"] as? String == "\(local)@xn--bcher-kva.de")
            let mail = try #require(try await env.mails(to: "\(local)@xn--bcher-kva.de").first)
            #expect(mail.contains("To: \(local)@xn--bcher-kva.de"))
            // The same domain, spelt in capitals or as its A-label, is the same account.
            #expect(try await env.logIn("\(local)@B\u{DC}CHER.de", "correct horse battery").status == .ok)
            #expect(try await env.logIn("\(local)@XN--BCHER-KVA.de", "correct horse battery").status == .ok)
            let taken = try await env.call(.post, "/v1/auth/signup", json: ["email": "\(local)@xn--bcher-kva.de", "password": "correct horse battery"])
            #expect(taken.code == "email_taken", "\(taken.text)")
            // A domain IDNA2008 refuses.
            let invalid = try await env.call(.post, "/v1/auth/signup", json: ["email": "\(local)@xn--zz.de", "password": "correct horse battery"])
            #expect(invalid.code == "invalid_email", "\(invalid.text)")
        }
    }

    /// `ADMIN_EMAILS` holds canonical forms; an entry that breaks the rule stops the start, since it
    /// could never match an account (and a look-alike must not be mistaken for the admin's address).
    @Test func adminEmailsAreCanonicalAndALookAlikeEntryIsRefused() throws {
        let settings = try AuthSettings(
            try ServiceConfig.load(name: "auth", defaultPort: 8081, environment: ["APP_ENV": "test", "ADMIN_EMAILS": " Boss@B\u{FC}cher.de , ops@Example.com,"]))
        #expect(settings.adminEmails == ["boss@xn--bcher-kva.de", "ops@example.com"])
        let error = #expect(throws: ConfigurationError.self) {
            try AuthSettings(try ServiceConfig.load(name: "auth", defaultPort: 8081, environment: ["APP_ENV": "test", "ADMIN_EMAILS": "ops@example.com, \u{212A}ate@corp.test"]))
        }
        #expect(String(describing: error).contains("ADMIN_EMAILS"), "\(String(describing: error))")
    }

    /// A provider's email claim follows the same rule; the verification a provider vouches for says
    /// which provider it was.
    @Test func providerClaimsFollowTheRuleAndVouchingIsNamed() async throws {
        try await AuthTestEnvironment.run { env in
            let local = TestEnvironment.uniqueName("kate")
            let kelvin = try await env.signIn(with: .google, subject: "google-\(UUID())", email: "\u{212A}" + local.dropFirst() + "@gmail.com")
            #expect(kelvin.status == .badRequest && kelvin.code == "invalid_email", "\(kelvin.text)")

            let relay = "\(local)@privaterelay.appleid.com"
            let apple = try await env.signIn(with: .apple, subject: "apple-\(UUID())", email: relay)
            #expect(apple.status == .ok || apple.status == .created, "\(apple.text)")
            let id = try #require(apple.json[path: "user.id"] as? String)
            let typed = try await env.signUp("\(TestEnvironment.uniqueName("typed"))@privaterelay.appleid.com")
            let redis = RedisClient(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
            defer { Task { await redis.close() } }
            try await waitUntil(.seconds(15)) {
                try await redis.xrange(env.config.events.stream, count: 10_000).contains { entry in
                    entry.fields["type"] == "user.email_verified" && entry.fields["envelope"]?.contains(id) == true
                }
            }
            let verified = try await redis.xrange(env.config.events.stream, count: 10_000).filter { $0.fields["type"] == "user.email_verified" }
            let own = try #require(verified.first { $0.fields["envelope"]?.contains(id) == true }?.fields["envelope"])
            #expect(own.contains("\"vouched_by\":\"apple\""), "\(own)")
            #expect(!verified.contains { $0.fields["envelope"]?.contains(typed.id) == true })
        }
    }
}
