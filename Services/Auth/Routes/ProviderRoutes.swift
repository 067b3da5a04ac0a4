import Foundation
import Hummingbird
import ServiceKit

/// Sign in with Apple and Google from native apps: the app sends the provider's ID token, the
/// service verifies it itself and signs the person in, making the account on first use.
struct ProviderRoutes {
    let accounts: Accounts

    func add(to router: Router<ServiceRequestContext>) {
        router.post("v1/auth/nonce", use: nonce)
        router.post("v1/auth/apple", use: { request, context in try await signIn(request, context: context, with: accounts.apple, name: "Apple") })
        router.post("v1/auth/google", use: { request, context in try await signIn(request, context: context, with: accounts.google, name: "Google") })
    }

    struct NonceResponse: Codable, Sendable {
        var nonce: String
        var expiresAt: Date
        enum CodingKeys: String, CodingKey { case nonce, expiresAt = "expires_at" }
    }

    /// A nonce for one provider sign-in (`ProviderNonces` says why). Anyone may ask: nothing is stored.
    @Sendable func nonce(_ request: Request, context: ServiceRequestContext) async throws -> NonceResponse {
        let (nonce, expiresAt) = accounts.nonces.issue()
        return NonceResponse(nonce: nonce, expiresAt: expiresAt)
    }

    struct ProviderRequest: StrictJSONBody {
        var idToken: String
        var nonce: String?
        /// Apple sends the user's name to the app only the first time; the app passes it on.
        var name: PersonName?
        /// The password of the existing account with the token's address, to link this sign-in to it
        /// where the provider does not answer for the address (`409 account_exists` said so).
        var password: String?
        enum CodingKeys: String, CodingKey, CaseIterable { case idToken = "id_token", nonce, name, password }
    }

    /// Apple's name arrives as given and family name; a plain string is accepted too.
    struct PersonName: Decodable {
        var full: String?

        enum CodingKeys: String, CodingKey { case givenName = "given_name", familyName = "family_name", firstName, lastName }

        init(from decoder: any Decoder) throws {
            if let text = try? decoder.singleValueContainer().decode(String.self) {
                full = text
                return
            }
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let given = try container.decodeIfPresent(String.self, forKey: .givenName) ?? container.decodeIfPresent(String.self, forKey: .firstName)
            let family = try container.decodeIfPresent(String.self, forKey: .familyName) ?? container.decodeIfPresent(String.self, forKey: .lastName)
            let parts = [given, family].compactMap { $0?.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            full = parts.isEmpty ? nil : parts.joined(separator: " ")
        }
    }

    func signIn(_ request: Request, context: ServiceRequestContext, with verifier: IdentityTokenVerifier?, name providerName: String) async throws -> SignInResponse {
        guard let verifier else {
            // Not a fault of the server's: this deployment does not offer the provider (no client ids
            // configured), as if the route did not exist.
            throw APIError(.notFound, code: "provider_not_configured", detail: "Sign in with \(providerName) is not set up on this server.")
        }
        let body = try await request.decode(as: ProviderRequest.self, context: context)
        // A nonce this server did not issue, or an expired one, is refused before the token is read;
        // a spent one in the sign-in's transaction, where spending it is part of the sign-in.
        let nonceExpiry: Date?
        if let nonce = body.nonce {
            do { nonceExpiry = try accounts.nonces.check(nonce) } catch { throw error.apiError }
        } else if accounts.settings.providerNonceRequired {
            throw APIError.validation([.init(field: "nonce", message: "is required: get one from POST /v1/auth/nonce and pass it to \(providerName)'s sign-in")])
        } else {
            nonceExpiry = nil
        }
        let identity: VerifiedIdentity
        do {
            identity = try await verifier.verify(body.idToken, nonce: body.nonce)
        } catch let error as IdentityTokenError {
            throw error.apiError
        }
        let attempt = Accounts.ProviderSignIn(
            identity: identity, providerName: providerName, nonce: body.nonce, nonceExpiry: nonceExpiry, name: body.name?.full, linkPassword: body.password)
        return try await accounts.signIn(attempt, client: context.client(request), logger: context.logger)
    }
}

extension ProviderRoutes.NonceResponse: ResponseEncodable {}
