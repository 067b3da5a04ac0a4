import AppStoreServer
import Foundation
import HTTPTypes
import Models
@testable import Entitlements
import Testing
import TestSupport

/// Purchases from the device and App Store Server Notifications V2, through HTTP, signed by the
/// test's own chain.
@Suite struct AppStoreNotificationTests {
    typealias Env = EntitlementsTestEnvironment

    @Test func aPurchaseLiftsTheTierAndTheSameTransactionTwiceChangesNothing() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let transaction = try await env.transaction(original: "2000000001", for: user)
            let bought = try await env.buy(transaction, as: user)
            #expect(bought.status == .ok, "\(bought.text)")
            #expect(bought.json["tier"] as? String == "pro" && bought.json["source"] as? String == "app_store" && bought.json["state"] as? String == "active")
            #expect(bought.json[path: "limits.sources.limit"] is NSNull)
            #expect(bought.json[path: "features.ai_suggestions"] as? Bool == true)
            let again = try await env.buy(transaction, as: user)
            #expect(again.status == .ok && again.json["tier"] as? String == "pro")
            #expect(try await env.count("SELECT count(*) FROM transactions") == 1)
            #expect(try await env.count("SELECT count(*) FROM subscriptions") == 1)
            try await waitUntil(.seconds(15)) {
                try await env.events("entitlement.changed").filter { $0["user_id"] as? String == user.path }.count == 1
            }
        }
    }

    @Test func anotherUsersPurchaseIsRefusedOrMovedAsConfigured() async throws {
        try await Env.run { env in
            let owner = try await env.user()
            let other = try await env.user()
            let theirs = try await env.transaction(original: "2000000010", for: owner)
            let refused = try await env.buy(theirs, as: other)
            #expect(refused.status == .conflict && refused.code == "purchase_owned_elsewhere")
            // Without a token (offer codes, Family Sharing) it goes to whoever sends it.
            let untokened = try await env.transaction(original: "2000000011", token: nil)
            #expect(try await env.buy(untokened, as: other).json["tier"] as? String == "pro")
            // Once someone holds it, another account cannot take it either.
            #expect(try await env.buy(untokened, as: owner).code == "purchase_owned_elsewhere")
        }
        try await Env.run(["APPLE_TRANSFER_POLICY": "transfer"]) { env in
            let owner = try await env.user()
            let other = try await env.user()
            let theirs = try await env.transaction(original: "2000000012", for: owner)
            #expect(try await env.buy(theirs, as: owner).json["tier"] as? String == "pro")
            #expect(try await env.me(owner)["tier"] as? String == "pro", "read (and kept) before it moves")
            let moved = try await env.buy(theirs, as: other)
            #expect(moved.status == .ok && moved.json["tier"] as? String == "pro")
            #expect(try await env.me(owner)["tier"] as? String == "free")
            try await waitUntil(.seconds(15)) {
                let changes = try await env.events("entitlement.changed")
                return changes.contains { $0["user_id"] as? String == owner.path && $0["tier"] as? String == "free" }
                    && changes.contains { $0["user_id"] as? String == other.path && $0["tier"] as? String == "pro" }
            }
        }
    }

    @Test func aRestoreAppliesEachTransaction() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let old = try await env.transaction(original: "2000000020", for: user, days: 30, purchased: env.clock.now() - 90 * 86_400, signed: env.clock.now() - 90 * 86_400)
            let team = try await env.transaction("com.researchapp.team.monthly", original: "2000000021", for: user)
            let reply = try await env.call(.post, "/v1/purchases/apple/restore", as: user, json: ["signed_transactions": [try env.appStore.sign(old), try env.appStore.sign(team)]])
            #expect(reply.status == .ok && reply.json["tier"] as? String == "team")
            #expect(try await env.count("SELECT count(*) FROM subscriptions WHERE user_id = '\(user.id)'") == 2)
            #expect(try await env.call(.post, "/v1/purchases/apple/restore", as: user, json: ["signed_transactions": []]).status == .badRequest)
            #expect(try await env.call(.post, "/v1/purchases/apple/restore", as: user, json: ["signed_transactions": ["x.y.z"]]).code == "invalid_signed_transaction")
        }
    }

    @Test func subscribedRenewedExpiredFollowTheSignedState() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let first = try await env.transaction(original: "2000000030", for: user, days: 30)
            #expect(try await env.deliver(try env.notification("SUBSCRIBED", subtype: "INITIAL_BUY", transaction: first, renewal: env.renewal(first))).status == .ok)
            #expect(try await env.me(user)["tier"] as? String == "pro")
            env.clock.advance(30 * 86_400 - 10)
            let renewed = try await env.transaction(original: "2000000030", for: user, days: 30)
            #expect(try await env.deliver(try env.notification("DID_RENEW", transaction: renewed, renewal: env.renewal(renewed))).status == .ok)
            env.clock.advance(20)
            var me = try await env.me(user)
            #expect(me["tier"] as? String == "pro" && me["will_renew"] as? Bool == true)
            // Auto-renew off, then the period ends: free.
            env.clock.advance(60)
            #expect(
                try await env.deliver(
                    try env.notification("DID_CHANGE_RENEWAL_STATUS", subtype: "AUTO_RENEW_DISABLED", transaction: renewed, renewal: env.renewal(renewed, renews: false, signed: env.clock.now()))
                ).status == .ok)
            #expect(try await env.me(user)["will_renew"] as? Bool == false)
            env.clock.advance(31 * 86_400)
            me = try await env.me(user)
            #expect(me["tier"] as? String == "free" && me["state"] as? String == "expired", "expiry is decided when read, before any notification")
            #expect(
                try await env.deliver(try env.notification("EXPIRED", subtype: "VOLUNTARY", transaction: renewed, renewal: env.renewal(renewed, renews: false, signed: env.clock.now()))).status == .ok)
            #expect(try await env.me(user)["tier"] as? String == "free")
        }
    }

    /// A subscription's or a grant's end comes with no request, and Apple's EXPIRED after it, when
    /// the entitlement already reads as ended: the sweep announces the end, once, so the services
    /// that keep caps (nutrition's allowances) do not keep the paid ones.
    @Test func anEndThatNoRequestBringsIsAnnounced() async throws {
        try await Env.run(["ENTITLEMENT_EXPIRY_SWEEP_MS": "200"]) { env in
            let user = try await env.user()
            @Sendable func told() async throws -> [[String: Any]] {
                try await env.events("entitlement.changed").filter { $0["user_id"] as? String == user.path }
            }
            let bought = try await env.transaction(original: "2000000077", for: user, days: 30)
            #expect(try await env.deliver(try env.notification("SUBSCRIBED", subtype: "INITIAL_BUY", transaction: bought, renewal: env.renewal(bought))).status == .ok)
            try await waitUntil(.seconds(15)) { try await told().map { $0["tier"] as? String } == ["pro"] }

            env.clock.advance(31 * 86_400)
            try await waitUntil(.seconds(15)) { try await told().count == 2 }
            let ended = try #require(try await told().last)
            #expect(ended["tier"] as? String == "free" && ended["state"] as? String == "expired", "\(ended)")
            // Apple's EXPIRED changes nothing more: no second announcement of the end. (Events are
            // relayed in order: once a later one is out, none of this user's is still coming.)
            #expect(
                try await env.deliver(
                    try env.notification("EXPIRED", subtype: "VOLUNTARY", transaction: bought, renewal: env.renewal(bought, renews: false, signed: env.clock.now()))
                ).status == .ok)
            let other = try await env.user()
            try await env.grant(other, tier: "pro", days: 1)
            try await waitUntil(.seconds(15)) { try await env.events("entitlement.changed").contains { $0["user_id"] as? String == other.path } }
            #expect(try await told().count == 2)

            // A grant's end likewise.
            env.clock.advance(2 * 86_400)
            try await waitUntil(.seconds(15)) {
                try await env.events("entitlement.changed").filter { $0["user_id"] as? String == other.path }.last?["tier"] as? String == "free"
            }
        }
    }

    /// A payload signed at t2 then one signed at t1: the t2 state stays (a late EXPIRED cannot undo
    /// a DID_RENEW).
    @Test func anOlderNotificationNeverOverwritesANewerOne() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let t1 = env.clock.now() - 120
            let t2 = env.clock.now() - 60
            let expired = try await env.transaction(original: "2000000040", for: user, days: 30, purchased: t1 - 30 * 86_400, signed: t1)
            let renewed = try await env.transaction(original: "2000000040", for: user, days: 30, purchased: t2 - 60, signed: t2)
            let renewal = try env.notification("DID_RENEW", transaction: renewed, renewal: env.renewal(renewed), signed: t2)
            let late = try env.notification("EXPIRED", subtype: "VOLUNTARY", transaction: expired, renewal: env.renewal(expired, renews: false), signed: t1)
            #expect(try await env.deliver(renewal).json["applied"] as? Bool == true)
            let stale = try await env.deliver(late)
            #expect(stale.status == .ok && stale.json["applied"] as? Bool == false)
            #expect(try await env.me(user)["tier"] as? String == "pro")
            let explain = try await env.call(.get, "/v1/admin/entitlements/\(user.path)/explain", as: env.admin)
            #expect((explain.json["history"] as? [[String: Any]] ?? []).filter { $0["kind"] as? String == "notification" }.count == 2)
        }
    }

    /// Two identical deliveries at once: one row, two 200s.
    @Test func duplicateDeliveriesAtOnceMakeOneRow() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let transaction = try await env.transaction(original: "2000000050", for: user)
            let payload = try env.notification("SUBSCRIBED", subtype: "RESUBSCRIBE", transaction: transaction, renewal: env.renewal(transaction))
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for _ in 0..<2 { group.addTask { try await env.concurrentCall(.post, "/v1/webhooks/app-store", as: nil, json: ["signedPayload": payload]) } }
                return try await group.reduce(into: [HTTPResponse.Status]()) { $0.append($1) }
            }
            #expect(statuses == [.ok, .ok])
            #expect(try await env.count("SELECT count(*) FROM notifications") == 1)
            #expect(try await env.me(user)["tier"] as? String == "pro")
        }
    }

    /// DID_FAIL_TO_RENEW with a grace period keeps the features until the grace period ends; without
    /// one, billing retry gives nothing; recovery brings the tier back.
    @Test func billingTroubleAndTheGracePeriod() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let first = try await env.transaction(original: "2000000060", for: user, days: 30)
            #expect(try await env.deliver(try env.notification("SUBSCRIBED", subtype: "INITIAL_BUY", transaction: first, renewal: env.renewal(first))).status == .ok)
            env.clock.advance(30 * 86_400 + 60)
            let grace = env.clock.now() + 6 * 86_400
            #expect(
                try await env.deliver(
                    try env.notification("DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD", transaction: first, renewal: env.renewal(first, retry: true, grace: grace, signed: env.clock.now()))
                ).status == .ok)
            var me = try await env.me(user)
            #expect(me["tier"] as? String == "pro" && me["state"] as? String == "grace_period" && me["billing_issue"] as? Bool == true)
            env.clock.advance(7 * 86_400)
            me = try await env.me(user)
            #expect(me["tier"] as? String == "free" && me["state"] as? String == "billing_retry" && me["billing_issue"] as? Bool == true)
            #expect(me[path: "features.ai_suggestions"] as? Bool == false, "the grace period's end switches the features off")
            #expect(
                try await env.deliver(try env.notification("GRACE_PERIOD_EXPIRED", transaction: first, renewal: env.renewal(first, retry: true, grace: grace, signed: env.clock.now()))).status == .ok)
            #expect(try await env.me(user)["state"] as? String == "billing_retry")
            let recovered = try await env.transaction(original: "2000000060", for: user, days: 30)
            #expect(try await env.deliver(try env.notification("DID_RENEW", subtype: "BILLING_RECOVERY", transaction: recovered, renewal: env.renewal(recovered))).status == .ok)
            me = try await env.me(user)
            #expect(me["tier"] as? String == "pro" && me["state"] as? String == "active" && me["billing_issue"] as? Bool == false)
            // Without a grace period the failure takes the tier at once.
            let other = try await env.user()
            let lapsed = try await env.transaction(original: "2000000061", for: other, days: 1, purchased: env.clock.now() - 86_400 - 60)
            #expect(try await env.deliver(try env.notification("DID_FAIL_TO_RENEW", transaction: lapsed, renewal: env.renewal(lapsed, retry: true))).status == .ok)
            me = try await env.me(other)
            #expect(me["tier"] as? String == "free" && me["state"] as? String == "billing_retry" && me["billing_issue"] as? Bool == true)
        }
    }

    @Test func refundThenRefundReversedAndRevoke() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let bought = try await env.transaction(original: "2000000070", id: "3000000070", for: user)
            #expect(try await env.buy(bought, as: user).status == .ok)
            env.clock.advance(60)
            var refunded = try await env.transaction(original: "2000000070", id: "3000000070", for: user, purchased: bought.purchaseDate, revoked: env.clock.now())
            refunded.revocationReason = 0
            #expect(try await env.deliver(try env.notification("REFUND", transaction: refunded)).status == .ok)
            var me = try await env.me(user)
            #expect(me["tier"] as? String == "free" && me["state"] as? String == "revoked")
            env.clock.advance(60)
            let reversed = try await env.transaction(original: "2000000070", id: "3000000070", for: user, purchased: bought.purchaseDate)
            #expect(try await env.deliver(try env.notification("REFUND_REVERSED", transaction: reversed)).status == .ok)
            me = try await env.me(user)
            #expect(me["tier"] as? String == "pro" && me["state"] as? String == "active")
            env.clock.advance(60)
            let revoked = try await env.transaction(original: "2000000070", id: "3000000070", for: user, purchased: bought.purchaseDate, revoked: env.clock.now())
            #expect(try await env.deliver(try env.notification("REVOKE", transaction: revoked)).status == .ok)
            #expect(try await env.me(user)["state"] as? String == "revoked")
        }
    }

    /// A DOWNGRADE keeps the tier until the period ends; an UPGRADE is a new transaction at once.
    @Test func downgradeAtExpiryUpgradeNow() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let team = try await env.transaction("com.researchapp.team.monthly", original: "2000000080", for: user, days: 30)
            #expect(try await env.buy(team, as: user).json["tier"] as? String == "team")
            env.clock.advance(60)
            #expect(
                try await env.deliver(
                    try env.notification("DID_CHANGE_RENEWAL_PREF", subtype: "DOWNGRADE", transaction: team, renewal: env.renewal(team, next: "com.researchapp.pro.monthly", signed: env.clock.now()))
                ).status == .ok)
            #expect(try await env.me(user)["tier"] as? String == "team", "a downgrade waits for the period's end")
            env.clock.advance(30 * 86_400)
            let renewedAsPro = try await env.transaction(original: "2000000080", for: user, days: 30)
            #expect(try await env.deliver(try env.notification("DID_RENEW", transaction: renewedAsPro, renewal: env.renewal(renewedAsPro))).status == .ok)
            #expect(try await env.me(user)["tier"] as? String == "pro")
            env.clock.advance(60)
            let upgraded = try await env.transaction("com.researchapp.team.monthly", original: "2000000080", for: user, days: 30)
            #expect(try await env.deliver(try env.notification("DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE", transaction: upgraded, renewal: env.renewal(upgraded))).status == .ok)
            #expect(try await env.me(user)["tier"] as? String == "team")
        }
    }

    /// An upgrade from a yearly plan to a monthly one of a higher tier takes over at once, though it
    /// ends first (Apple refunds the rest of the year); the old year, signed again (a restore's
    /// history, or marked as upgraded), does not come back.
    @Test func anUpgradeToAShorterPlanTakesOver() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let year = try await env.transaction("com.researchapp.pro.yearly", original: "2000000081", for: user, days: 365)
            #expect(try await env.buy(year, as: user).json["tier"] as? String == "pro")
            env.clock.advance(30 * 86_400)
            let team = try await env.transaction("com.researchapp.team.monthly", original: "2000000081", for: user, days: 30)
            #expect(try await env.deliver(try env.notification("DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE", transaction: team, renewal: env.renewal(team))).status == .ok)
            #expect(try await env.me(user)["tier"] as? String == "team")
            env.clock.advance(60)
            var superseded = try await env.transaction("com.researchapp.pro.yearly", original: "2000000081", id: year.transactionID, for: user, days: 365, purchased: year.purchaseDate)
            superseded.isUpgraded = true
            #expect(try await env.buy(superseded, as: user).json["tier"] as? String == "team")
            let signedAgain = try await env.transaction(
                "com.researchapp.pro.yearly", original: "2000000081", id: year.transactionID, for: user, days: 365, purchased: year.purchaseDate)
            #expect(try await env.buy(signedAgain, as: user).json["tier"] as? String == "team")
            // The month ends, and nothing renews it: free, not the year it replaced.
            env.clock.advance(31 * 86_400)
            #expect(try await env.me(user)["tier"] as? String == "free")
        }
    }

    /// The old plan's transaction, marked as replaced by an upgrade, arrives before anything else
    /// of its subscription (a restore on a new device lists it first): it gives no tier, and the
    /// upgrade's transaction, under the same original id, gives its own.
    @Test func aTransactionAnUpgradeReplacedGivesNothingWhenItComesFirst() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let year = try await env.transaction("com.researchapp.pro.yearly", original: "2000000082", for: user, days: 365)
            env.clock.advance(30 * 86_400)
            var superseded = try await env.transaction("com.researchapp.pro.yearly", original: "2000000082", id: year.transactionID, for: user, days: 365, purchased: year.purchaseDate)
            superseded.isUpgraded = true
            #expect(try await env.buy(superseded, as: user).json["tier"] as? String == "free")
            #expect(try await env.count("SELECT count(*) FROM subscriptions WHERE original_transaction_id = '2000000082'") == 0)
            let team = try await env.transaction("com.researchapp.team.monthly", original: "2000000082", for: user, days: 30)
            #expect(try await env.buy(team, as: user).json["tier"] as? String == "team")
            // Signed again, the replaced year still gives nothing.
            #expect(try await env.buy(superseded, as: user).json["tier"] as? String == "team")
        }
    }

    /// RENEWAL_EXTENDED and OFFER_REDEEMED move the dates; TEST and a type this code has never seen
    /// are stored and acknowledged; a stale one, a wrong app and a bad signature are 400.
    @Test func otherTypesAndRefusals() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let bought = try await env.transaction(original: "2000000090", for: user, days: 2)
            #expect(try await env.buy(bought, as: user).status == .ok)
            env.clock.advance(60)
            let extended = try await env.transaction(original: "2000000090", for: user, days: 40, purchased: bought.purchaseDate)
            #expect(try await env.deliver(try env.notification("RENEWAL_EXTENDED", transaction: extended, renewal: env.renewal(extended))).json["applied"] as? Bool == true)
            env.clock.advance(10 * 86_400)
            #expect(try await env.me(user)["tier"] as? String == "pro")
            let offer = try await env.transaction("com.researchapp.pro.yearly", original: "2000000090", for: user, days: 365)
            #expect(try await env.deliver(try env.notification("OFFER_REDEEMED", subtype: "UPGRADE", transaction: offer, renewal: env.renewal(offer))).json["applied"] as? Bool == true)
            #expect(try await env.deliver(try env.notification("TEST", transaction: nil)).status == .ok)
            env.clock.advance(60)
            let future = try await env.transaction("com.researchapp.pro.yearly", original: "2000000090", for: user, days: 365, purchased: offer.purchaseDate)
            let unknown = try await env.deliver(try env.notification("SOMETHING_APPLE_ADDS_LATER", transaction: future, renewal: env.renewal(future)))
            #expect(unknown.status == .ok && unknown.json["applied"] as? Bool == true)
            #expect(try await env.count("SELECT count(*) FROM notifications WHERE notification_type IN ('TEST', 'SOMETHING_APPLE_ADDS_LATER')") == 2)
            let stale = try await env.deliver(try env.notification("DID_RENEW", transaction: future, signed: env.clock.now() - 8 * 86_400))
            #expect(stale.status == .badRequest && stale.json["reason"] as? String == "stale")
            let otherApp = try await env.deliver(try env.notification("DID_RENEW", transaction: future, appAppleID: 42))
            #expect(otherApp.status == .badRequest && otherApp.json["reason"] as? String == "appAppleID")
            let forged = try await env.deliver(
                try AppStoreIssuer(name: "Forger").sign(AppStoreNotification(notificationType: "DID_RENEW", subtype: nil, notificationUUID: UUID().uuidString, signedDate: env.clock.now(), data: nil)))
            #expect(forged.status == .badRequest && forged.code == "invalid_notification")
            #expect(try await env.call(.post, "/v1/webhooks/app-store", json: ["payload": "x"]).status == .badRequest)
            #expect(try await env.call(.post, "/v1/webhooks/app-store", raw: .init(string: "not json"), headers: [.contentType: "application/json"]).status == .badRequest)
        }
    }

    /// A transaction of the period the subscription holds (same purchase date, another id), signed
    /// later, is taken even when the stored purchase date comes back from PostgreSQL a hair later
    /// than the payload's: the same millisecond is not an older period.
    @Test func aLaterTransactionOfTheSamePeriodIsTakenWhateverItsMillisecond() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let purchased = try #require(try await env.millisecondReadBackLater(after: env.clock.now() - 60))
            let bought = try await env.transaction(original: "2000000150", id: "3000000150", for: user, days: 2, purchased: purchased)
            #expect(try await env.buy(bought, as: user).status == .ok)
            env.clock.advance(60)
            let extended = try await env.transaction(original: "2000000150", id: "3000000151", for: user, days: 40, purchased: purchased)
            #expect(try await env.deliver(try env.notification("RENEWAL_EXTENDED", transaction: extended, renewal: env.renewal(extended))).json["applied"] as? Bool == true)
            #expect(try await env.count("SELECT count(*) FROM subscriptions WHERE transaction_id = '3000000151'") == 1)
            env.clock.advance(10 * 86_400)
            #expect(try await env.me(user)["tier"] as? String == "pro")
        }
    }

    /// A purchase a notification recorded first (no token: an offer code, Family Sharing) is the
    /// first account's to send it from the device, even though its device copy was signed earlier.
    @Test func aSubscriptionNobodyHoldsIsClaimedByTheDevice() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let other = try await env.user()
            let signedOnDevice = env.clock.now() - 120
            let onDevice = try await env.transaction(original: "2000000110", id: "3000000110", token: nil, signed: signedOnDevice)
            let notified = try await env.transaction(original: "2000000110", id: "3000000110", token: nil)
            #expect(try await env.deliver(try env.notification("SUBSCRIBED", subtype: "INITIAL_BUY", transaction: notified, renewal: env.renewal(notified))).status == .ok)
            #expect(try await env.count("SELECT count(*) FROM subscriptions WHERE user_id IS NULL") == 1)
            let claimed = try await env.buy(onDevice, as: user)
            #expect(claimed.status == .ok && claimed.json["tier"] as? String == "pro", "\(claimed.text)")
            #expect(try await env.buy(onDevice, as: other).code == "purchase_owned_elsewhere")
        }
    }

    /// A restore sends the subscription's history: an older period signed again later leaves the
    /// current one (and its expiry) alone.
    @Test func anOlderPeriodSignedLaterDoesNotReplaceTheCurrentOne() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let current = try await env.transaction("com.researchapp.team.monthly", original: "2000000120", id: "3000000121", for: user, days: 30)
            #expect(try await env.buy(current, as: user).json["tier"] as? String == "team")
            env.clock.advance(60)
            let past = try await env.transaction(
                original: "2000000120", id: "3000000120", for: user, days: 30, purchased: env.clock.now() - 40 * 86_400)
            let restored = try await env.call(.post, "/v1/purchases/apple/restore", as: user, json: ["signed_transactions": [try env.appStore.sign(past)]])
            #expect(restored.status == .ok && restored.json["tier"] as? String == "team", "\(restored.text)")
        }
    }

    /// A notification about an older period, signed later and delivered first, carries the current
    /// renewal info: taking that must not make the current period's refund, signed before it, look
    /// stale. Apple does not promise the order, and a notification answered 200 is not sent again.
    @Test func aRefundOvertakenByAnOlderPeriodsNotificationStillApplies() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let current = try await env.transaction(original: "2000000130", id: "3000000131", for: user, days: 30)
            #expect(try await env.buy(current, as: user).json["tier"] as? String == "pro")
            env.clock.advance(60)
            var refunded = try await env.transaction(original: "2000000130", id: "3000000131", for: user, days: 30, purchased: current.purchaseDate, revoked: env.clock.now())
            refunded.revocationReason = 0
            let refundSigned = env.clock.now()
            env.clock.advance(60)
            var pastRefunded = try await env.transaction(
                original: "2000000130", id: "3000000130", for: user, days: 30, purchased: current.purchaseDate - 30 * 86_400, revoked: env.clock.now())
            pastRefunded.revocationReason = 0
            let past = try env.notification("REFUND", transaction: pastRefunded, renewal: env.renewal(current, renews: false, signed: env.clock.now()))
            #expect(try await env.deliver(past).status == .ok)
            #expect(try await env.me(user)["tier"] as? String == "pro", "an older period's refund leaves the current one")
            let late = try env.notification("REFUND", transaction: refunded, renewal: env.renewal(refunded, renews: false, signed: refundSigned), signed: refundSigned)
            #expect(try await env.deliver(late).status == .ok)
            let me = try await env.me(user)
            #expect(me["tier"] as? String == "free" && me["state"] as? String == "revoked", "\(me)")
        }
    }

    /// A notification without `data` must still name this app (`summary`), or it is refused.
    @Test func aNotificationThatNamesNoAppIsRefused() async throws {
        try await Env.run { env in
            let nameless = try env.appStore.sign(
                AppStoreNotification(notificationType: "RENEWAL_EXTENSION", subtype: "SUMMARY", notificationUUID: UUID().uuidString, signedDate: env.clock.now(), data: nil))
            let refused = try await env.deliver(nameless)
            #expect(refused.status == .badRequest && refused.json["reason"] as? String == "bundle")
            var summary = AppStoreNotification(notificationType: "RENEWAL_EXTENSION", subtype: "SUMMARY", notificationUUID: UUID().uuidString, signedDate: env.clock.now(), data: nil)
            summary.summary = .init(bundleID: Env.bundleID, environment: .production, appAppleID: Env.appAppleID)
            #expect(try await env.deliver(try env.appStore.sign(summary)).status == .ok)
            summary.notificationUUID = UUID().uuidString
            summary.summary = .init(bundleID: "com.other.app", environment: .production, appAppleID: Env.appAppleID)
            #expect(try await env.deliver(try env.appStore.sign(summary)).json["reason"] as? String == "bundle")
        }
    }

    /// A deleted user's purchases are kept for accounting without the person.
    @Test func aDeletedUsersPurchasesStayWithoutThePerson() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let bought = try await env.transaction(original: "2000000100", for: user)
            #expect(try await env.buy(bought, as: user).status == .ok)
            try await env.publish(UserDeleted(userID: user.id), userID: user.id)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM customers WHERE user_id = '\(user.id)'") == 0 }
            #expect(try await env.count("SELECT count(*) FROM subscriptions WHERE user_id IS NULL AND app_account_token IS NULL") == 1)
            #expect(try await env.count("SELECT count(*) FROM transactions WHERE user_id IS NULL") == 1)
            #expect(try await env.count("SELECT count(*) FROM entitlement_versions WHERE user_id = '\(user.id)'") == 0)
            // The subscription goes on renewing at Apple, each renewal carrying the account's token:
            // it is not kept again.
            env.clock.advance(30 * 86_400)
            let renewed = try await env.transaction(original: "2000000100", token: bought.appAccountToken, purchased: env.clock.now() - 60)
            #expect(try await env.deliver(try env.notification("DID_RENEW", transaction: renewed, renewal: env.renewal(renewed))).status == .ok)
            #expect(try await env.count("SELECT count(*) FROM subscriptions WHERE transaction_id = '\(renewed.transactionID)'") == 1)
            #expect(try await env.count("SELECT count(*) FROM subscriptions WHERE user_id IS NULL AND app_account_token IS NULL") == 1)
        }
    }

    /// Renewal info Apple signed before a purchase the app sent (a restore: the same transaction,
    /// signed later, with no renewal info), delivered after it (Apple retrying a refused delivery):
    /// it is the only renewal info the subscription has, and is taken; the grace period holds.
    @Test func renewalInfoSignedBeforeTheAppsPurchaseIsTaken() async throws {
        try await Env.run { env in
            let user = try await env.user()
            let first = try await env.transaction(original: "2000000110", for: user, days: 30)
            env.clock.advance(30 * 86_400 + 60)
            let failedAt = env.clock.now()
            let failure = try env.notification(
                "DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD", transaction: first,
                renewal: env.renewal(first, retry: true, grace: failedAt + 6 * 86_400, signed: failedAt), signed: failedAt)
            env.clock.advance(60)
            let restored = try await env.transaction(original: "2000000110", id: first.transactionID, for: user, purchased: first.purchaseDate, signed: env.clock.now())
            #expect(try await env.buy(restored, as: user).status == .ok)
            #expect(try await env.me(user)["state"] as? String == "expired")
            #expect(try await env.deliver(failure).status == .ok)
            let me = try await env.me(user)
            #expect(me["tier"] as? String == "pro" && me["state"] as? String == "grace_period" && me["billing_issue"] as? Bool == true, "\(me)")
        }
    }
}
