import AppStoreServer
import Foundation
import ServiceKit

/// An App Store subscription as stored: the latest verified state of one original transaction.
struct SubscriptionRecord: Sendable, Decodable, Equatable {
    var originalTransactionID: String
    var productID: String
    var environment: String
    var purchasedAt: Date
    var expiresAt: Date?
    var revokedAt: Date?
    var willRenew: Bool?
    var renewalProductID: String?
    var billingRetry: Bool
    var gracePeriodEndsAt: Date?
    var signedAt: Date

    /// Not bought from the App Store: in its sandbox, or in Xcode's StoreKit testing (flagged `is_sandbox`).
    var isSandbox: Bool { environment != AppStoreEnvironment.production.rawValue }

    /// Bought in the App Store's sandbox (TestFlight, App Review): what `APPLE_ACCEPT_SANDBOX` decides
    /// of. Xcode's and StoreKit testing's are only ever accepted outside production.
    var isAppStoreSandbox: Bool { environment == AppStoreEnvironment.sandbox.rawValue }

    /// Where a subscription stands at `now`, from its dates alone: decided at read time, so a tier
    /// never outlives its subscription waiting for a sweep.
    func state(at now: Date) -> Entitlement.State {
        if revokedAt != nil { return .revoked }
        if let expiresAt, now >= expiresAt {
            if let grace = gracePeriodEndsAt, now < grace { return .gracePeriod }
            return billingRetry ? .billingRetry : .expired
        }
        return .active
    }
}

/// A tier given by an administrator.
struct GrantRecord: Sendable, Decodable, Equatable {
    var id: UUID
    var tier: String
    var until: Date
    var reason: String
    var grantedBy: UUID
    var createdAt: Date
    var revokedAt: Date?
}

/// What a user may do now: the tier and where it comes from, its state, its features and limits.
struct Entitlement: Sendable, Equatable {
    enum State: String, Sendable, Codable {
        case active, gracePeriod = "grace_period", billingRetry = "billing_retry", expired, revoked
        /// A paid tier counts in these states.
        var grantsAccess: Bool { self == .active || self == .gracePeriod }
    }

    enum Source: String, Sendable, Codable { case free, appStore = "app_store", grant }

    /// One thing that could give a tier, and whether it does now: the steps `explain` shows.
    struct Candidate: Sendable, Equatable {
        var kind: Source
        var id: String
        var tier: String?
        var state: State
        var expiresAt: Date?
        var counts: Bool
        var reason: String
    }

    var tier: String
    var source: Source
    var state: State
    var expiresAt: Date?
    var willRenew: Bool?
    var billingIssue: Bool
    var isSandbox: Bool
    var features: [String: Bool]
    var caps: [String: Int?]
    var candidates: [Candidate]
    /// Why this tier, in a sentence.
    var derivation: String

    func has(_ feature: String) -> Bool { features[feature] ?? false }

    /// The best tier the user's subscriptions and grants give at `now`, else free. The highest rank
    /// wins; among equals, the one that lasts longer. A sandbox subscription counts only where
    /// `acceptsSandbox` (`EntitlementsSettings.acceptsSandbox`): one bought while sandbox purchases
    /// counted gives nothing once they no longer do, as a new one would not.
    static func derive(subscriptions: [SubscriptionRecord], grants: [GrantRecord], catalog: Catalog, acceptsSandbox: Bool, now: Date) -> Entitlement {
        var candidates: [Candidate] = []
        var best: (candidate: Candidate, tier: Catalog.Tier, subscription: SubscriptionRecord?)?
        func consider(_ candidate: Candidate, tier: Catalog.Tier?, subscription: SubscriptionRecord?) {
            candidates.append(candidate)
            guard candidate.counts, let tier else { return }
            if let current = best {
                let longer = (candidate.expiresAt ?? .distantFuture) > (current.candidate.expiresAt ?? .distantFuture)
                guard tier.rank > current.tier.rank || (tier.rank == current.tier.rank && longer) else { return }
            }
            best = (candidate, tier, subscription)
        }
        for subscription in subscriptions.sorted(by: { $0.signedAt < $1.signedAt }) {
            let tier = catalog.tier(forProduct: subscription.productID)
            let state = subscription.state(at: now)
            let refused = subscription.isAppStoreSandbox && !acceptsSandbox
            let reason: String =
                if tier == nil { "product \(subscription.productID) is in no tier of the catalogue" } else if refused {
                    "a sandbox purchase (TestFlight or App Review), which gives no tier here: APPLE_ACCEPT_SANDBOX is off"
                } else {
                    switch state {
                    case .active: "active until \(subscription.expiresAt.map { ISO8601DateFormatter().string(from: $0) } ?? "no expiry")"
                    case .gracePeriod: "renewal failed; in the billing grace period, which still gives the tier"
                    case .billingRetry: "renewal failed and the grace period is over; Apple is retrying the payment"
                    case .expired: "expired"
                    case .revoked: "revoked (refunded or no longer shared)"
                    }
                }
            consider(
                Candidate(
                    kind: .appStore, id: subscription.originalTransactionID, tier: tier?.id, state: state, expiresAt: subscription.expiresAt,
                    counts: tier != nil && state.grantsAccess && !refused, reason: reason),
                tier: tier, subscription: subscription)
        }
        for grant in grants.sorted(by: { $0.createdAt < $1.createdAt }) {
            let tier = catalog.tier(grant.tier)
            let state: State = grant.revokedAt != nil ? .revoked : (now < grant.until ? .active : .expired)
            consider(
                Candidate(
                    kind: .grant, id: grant.id.uuidString.lowercased(), tier: grant.tier, state: state, expiresAt: grant.until,
                    counts: tier != nil && state == .active, reason: "granted: \(grant.reason)"),
                tier: tier, subscription: nil)
        }
        let features = { (tier: Catalog.Tier) in catalog.features(of: tier) }
        let caps = { (tier: Catalog.Tier) in catalog.caps(of: tier) }
        if let best {
            let subscription = best.subscription
            return Entitlement(
                tier: best.tier.id, source: best.candidate.kind, state: best.candidate.state, expiresAt: best.candidate.expiresAt,
                willRenew: subscription?.willRenew, billingIssue: subscription.map { $0.billingRetry && best.candidate.state == .gracePeriod } ?? false,
                isSandbox: subscription?.isSandbox ?? false, features: features(best.tier), caps: caps(best.tier),
                candidates: candidates, derivation: "\(best.tier.id) from \(best.candidate.kind.rawValue) \(best.candidate.id): \(best.candidate.reason)")
        }
        // Nothing paid counts: free, with the state of the latest subscription that could count, so the
        // app can say "expired" or "fix your payment".
        let latest = subscriptions.filter { acceptsSandbox || !$0.isAppStoreSandbox }.max { $0.signedAt < $1.signedAt }
        let state = latest?.state(at: now) ?? .active
        return Entitlement(
            tier: catalog.free.id, source: .free, state: state, expiresAt: latest?.expiresAt, willRenew: latest?.willRenew, billingIssue: state == .billingRetry,
            isSandbox: latest?.isSandbox ?? false, features: features(catalog.free), caps: caps(catalog.free), candidates: candidates,
            derivation: candidates.isEmpty ? "free: no purchases or grants" : "free: nothing bought or granted counts now")
    }

    /// `entitlement.changed` for `user` holding this: their caps, and the tier that would raise each.
    func changedEvent(of user: UUID, catalog: Catalog) -> EntitlementChanged {
        EntitlementChanged(
            userID: user, tier: tier, state: state.rawValue, features: features, limits: caps,
            limitUpgrades: catalog.limitUpgrades(from: catalog.tier(tier) ?? catalog.free))
    }

    /// What other services cache; an event is sent when it changes.
    var summary: EntitlementSummary { EntitlementSummary(tier: tier, state: state, features: features, caps: caps) }
}

struct EntitlementSummary: Equatable, Sendable {
    var tier: String
    var state: Entitlement.State
    var features: [String: Bool]
    var caps: [String: Int?]

    /// The summary as one text, the same for equal summaries: what `entitlement_announcements`
    /// keeps of the last one announced.
    var fingerprint: String {
        let features = self.features.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        let caps = self.caps.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value.map(String.init) ?? "none")" }
        return ([tier, state.rawValue] + features + caps).joined(separator: ";")
    }
}

extension Entitlement {
    /// The first moment after `now` at which the inputs' entitlement changes by the clock alone (a
    /// subscription's end or the end of its grace period, a grant's end); nil when none lies ahead.
    static func nextChange(subscriptions: [SubscriptionRecord], grants: [GrantRecord], after now: Date) -> Date? {
        var moments: [Date] = []
        for subscription in subscriptions where subscription.revokedAt == nil {
            moments += [subscription.expiresAt, subscription.gracePeriodEndsAt].compactMap { $0 }
        }
        for grant in grants where grant.revokedAt == nil { moments.append(grant.until) }
        return moments.filter { $0 > now }.min()
    }
}
