import AppStoreServer
import Foundation
import Hummingbird
import ServiceKit

/// App Store Server Notifications V2. No user token: trust comes from Apple's signature alone.
/// The state is derived from the verified transaction and renewal info, never from the type's
/// name, so a type this code does not know is stored, acknowledged and applied all the same.
struct WebhookRoutes {
    let entitlements: Entitlements

    func add(to router: Router<ServiceRequestContext>) {
        router.post("v1/webhooks/app-store", use: receive)
    }

    struct NotificationRequest: StrictJSONBody {
        var signedPayload: String
        enum CodingKeys: String, CodingKey, CaseIterable { case signedPayload }
    }

    struct Received: ResponseEncodable {
        var received: Bool
        var applied: Bool
        var duplicate: Bool
    }

    /// `200` once recorded (also for a redelivery, and for a payload older than what was applied);
    /// `400` when unverifiable, which Apple should not retry; `503` when the database is out of
    /// reach, which it should: nothing was recorded.
    @Sendable func receive(_ request: Request, context: ServiceRequestContext) async throws -> Received {
        let body = try await request.decode(as: NotificationRequest.self, context: context)
        let entitlements = self.entitlements
        let verified: SignedDataVerifier.VerifiedNotification
        do {
            verified = try await entitlements.verifier.verifyNotification(body.signedPayload, now: entitlements.clock())
        } catch let error as AppStoreVerificationError {
            context.logger.warning("app store notification refused", metadata: ["reason": "\(error.reason.rawValue)", "detail": "\(error.message)"])
            throw APIError(
                .badRequest, code: "invalid_notification", detail: "The notification was refused: \(error.reason.sentence)",
                extensions: ["reason": .string(error.reason.rawValue)])
        }
        let notification = verified.notification
        let original = verified.transaction?.originalTransactionID ?? verified.renewalInfo?.originalTransactionID
        return try await entitlements.postgres.transaction(logger: context.logger) { connection in
            guard try await entitlements.subscriptions.record(notification, originalTransactionID: original, on: connection, logger: context.logger) else {
                return Received(received: true, applied: false, duplicate: true)
            }
            guard let original else { return Received(received: true, applied: false, duplicate: false) }
            let holder = try await entitlements.subscriptions.holder(original, on: connection, logger: context.logger)
            var user = holder?.user
            if user == nil, let token = verified.transaction?.appAccountToken {
                user = try await entitlements.store.liveCustomer(withToken: token, on: connection, logger: context.logger)
            }
            let applied = try await entitlements.announcingChanges(for: user.map { [$0] } ?? [], on: connection, logger: context.logger) {
                if let transaction = verified.transaction {
                    return try await entitlements.subscriptions.apply(
                        transaction, renewal: verified.renewalInfo, signedAt: notification.signedDate, user: user, via: "notification", current: holder,
                        on: connection,
                        logger: context.logger)
                }
                guard let renewal = verified.renewalInfo else { return false }
                return try await entitlements.subscriptions.applyRenewal(renewal, signedAt: notification.signedDate, on: connection, logger: context.logger)
            }
            if applied { try await entitlements.subscriptions.markApplied(notification.notificationUUID, on: connection, logger: context.logger) }
            return Received(received: true, applied: applied, duplicate: false)
        }
    }
}
