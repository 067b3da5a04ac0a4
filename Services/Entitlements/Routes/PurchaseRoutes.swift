import AppStoreServer
import Foundation
import Hummingbird
import PostgresNIO
import ServiceKit

/// Purchases from the app: StoreKit 2's signed transactions, one after buying, many on restore.
struct PurchaseRoutes {
    let entitlements: Entitlements

    func add(to router: Router<ServiceRequestContext>) {
        let purchases = router.group("v1/purchases/apple", context: AuthenticatedContext.self)
        purchases.post(use: purchase)
        purchases.post("restore", use: restore)
    }

    struct PurchaseRequest: StrictJSONBody {
        var signedTransaction: String
        enum CodingKeys: String, CodingKey, CaseIterable { case signedTransaction = "signed_transaction" }
    }

    struct RestoreRequest: StrictJSONBody {
        var signedTransactions: [String]
        enum CodingKeys: String, CodingKey, CaseIterable { case signedTransactions = "signed_transactions" }
    }

    /// Verifies and stores the transaction; answers the caller's entitlement after it.
    @Sendable func purchase(_ request: Request, context: AuthenticatedContext) async throws -> EntitlementView {
        let body = try await request.decode(as: PurchaseRequest.self, context: context)
        let transaction = try await entitlements.verifiedTransaction(body.signedTransaction, field: "signed_transaction")
        return try await apply([transaction], context: context)
    }

    /// Each transaction as a purchase would apply it, in one transaction: all or none.
    @Sendable func restore(_ request: Request, context: AuthenticatedContext) async throws -> EntitlementView {
        let body = try await request.decode(as: RestoreRequest.self, context: context)
        guard (1...100).contains(body.signedTransactions.count) else {
            throw APIError.validation([.init(field: "signed_transactions", message: "must hold 1 to 100 signed transactions")])
        }
        var transactions: [AppStoreTransaction] = []
        for (index, signed) in body.signedTransactions.enumerated() {
            transactions.append(try await entitlements.verifiedTransaction(signed, field: "signed_transactions[\(index)]"))
        }
        return try await apply(transactions, context: context)
    }

    func apply(_ transactions: [AppStoreTransaction], context: AuthenticatedContext) async throws -> EntitlementView {
        let entitlements = self.entitlements
        let caller = context.caller.userID
        return try await entitlements.postgres.transaction(logger: context.logger) { connection in
            try await entitlements.store.ensureLiveCustomer(caller, on: connection, logger: context.logger)
            for transaction in transactions.sorted(by: { $0.signedDate < $1.signedDate }) {
                try await entitlements.applyFromDevice(transaction, caller: caller, on: connection, logger: context.logger)
            }
            let (entitlement, inputs) = try await entitlements.snapshot(caller, on: connection, logger: context.logger)
            return EntitlementView(entitlement, inputs: inputs)
        }
    }
}

extension Entitlements {
    static let ownedElsewhere = APIError.conflict("This purchase belongs to another account; sign in with that account to use it.", code: "purchase_owned_elsewhere")
    static let sandboxRefused = APIError(
        .forbidden, code: "sandbox_not_accepted",
        detail: "This is a sandbox purchase (TestFlight or App Review), and this server gives tiers only for App Store purchases.")

    /// A signed transaction from a device, verified; refused as `400 invalid_signed_transaction`, or
    /// `403 sandbox_not_accepted` from the sandbox where sandbox purchases give nothing.
    func verifiedTransaction(_ jws: String, field: String) async throws -> AppStoreTransaction {
        guard jws.utf8.count <= 64 * 1024 else { throw APIError.validation([.init(field: field, message: "is longer than a signed transaction can be")]) }
        do {
            let transaction = try await verifier.verifyTransaction(jws, now: clock())
            guard subscriptions.applies(transaction.environment, transaction.originalTransactionID, logger: logger) else { throw Self.sandboxRefused }
            return transaction
        } catch let error as AppStoreVerificationError {
            logger.notice("signed transaction refused", metadata: ["reason": "\(error.reason.rawValue)", "detail": "\(error.message)"])
            throw APIError(
                .badRequest, code: "invalid_signed_transaction", detail: "The signed transaction was refused: \(error.reason.sentence)",
                extensions: ["reason": .string(error.reason.rawValue)])
        }
    }

    /// Applies a device's transaction for `caller`. Whose it is: the user already holding the
    /// subscription, else the owner of its `appAccountToken`, else the caller. Someone else's is
    /// refused (`409 purchase_owned_elsewhere`) or moved to the caller, as configured.
    func applyFromDevice(_ transaction: AppStoreTransaction, caller: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        let holder = try await subscriptions.holder(transaction.originalTransactionID, on: connection, logger: logger)
        var claimant = holder?.user
        if claimant == nil, let token = transaction.appAccountToken {
            claimant = try await store.liveCustomer(withToken: token, on: connection, logger: logger)
        }
        if let claimant, claimant != caller {
            guard settings.transferPolicy == .transfer else { throw Self.ownedElsewhere }
            try await announcingChanges(for: [claimant, caller], on: connection, logger: logger) {
                if holder != nil { try await subscriptions.transfer(transaction.originalTransactionID, to: caller, on: connection, logger: logger) }
                let moved = holder.map { SubscriptionStore.Holder(user: caller, signedAt: $0.signedAt, transactionID: $0.transactionID, expiresAt: $0.expiresAt) }
                _ = try await subscriptions.apply(
                    transaction, renewal: nil, signedAt: transaction.signedDate, user: caller, via: "device", current: moved, on: connection, logger: logger)
            }
            return
        }
        try await announcingChanges(for: [caller], on: connection, logger: logger) {
            _ = try await subscriptions.apply(
                transaction, renewal: nil, signedAt: transaction.signedDate, user: caller, via: "device", current: holder, on: connection, logger: logger)
            // Two accounts sending one new purchase at once: the first to write it holds it. (None
            // holds it when the transaction made no subscription: one an upgrade replaced.)
            let now = try await subscriptions.holder(transaction.originalTransactionID, on: connection, logger: logger)
            guard now == nil || now?.user == caller else { throw Self.ownedElsewhere }
        }
    }
}
