import FoodBackendAPI
import FoodBackendClient
import Foundation

/// A free user is told to upgrade, buys Pro with a StoreKit transaction, hears it live, and passes.
func aFreeUserUpgradesAndPasses() async throws {
    let user = try await signUp("buyer")
    let app = user.app
    let tiers = try await app.send { try await $0.getV1Tiers().ok.body.json }
    try expect(tiers.items.contains { $0.id == "pro" }, "Pro among the tiers")
    do {
        _ = try await app.send { try await $0.postV1EntitlementsCheck(body: .json(.init(feature: "ai_suggestions"))).ok.body.json }
        throw JourneyFailure(description: "a free user may use ai_suggestions")
    } catch let error as FoodBackendError {
        guard case .requiresUpgrade(let tier) = error.code, tier == "pro" else { throw JourneyFailure(description: "expected requires_upgrade to pro: \(error)") }
    }
    let me = try await app.send { try await $0.getV1EntitlementsMe().ok.body.json }
    try expect(me.tier == "free", "free at first: \(me)")
    let acquired = try await app.send { try await $0.postV1UsageCounterAcquire(path: .init(counter: "sources"), body: .json(.init(amount: 1))).ok.body.json }
    _ = try await app.send {
        try await $0.postV1UsageCounterRelease(path: .init(counter: "sources"), body: .json(.init(acquisitionIds: [acquired.acquisitionId]))).ok.body.json
    }

    let stream = try await StreamReader(app)
    defer { stream.close() }
    let original = String(UInt64.random(in: 100_000_000_000...999_999_999_999))
    let bought = try await fixture("appstore/transaction", ["original": original, "token": me.appAccountToken])
    let signed = bought["signed"] as! String
    let purchase = try await app.send { try await $0.postV1PurchasesApple(body: .json(.init(signedTransaction: signed))).ok.body.json }
    try expect(purchase.tier == "pro", "Pro after the purchase: \(purchase)")
    let changed = try await stream.next("entitlement_changed") { event -> LiveEvent.EntitlementChanged? in
        if case .entitlementChanged(let changed) = event.kind { return changed }
        return nil
    }
    try expect(same(changed.userId, user.id) && changed.tier == "pro", "the change heard: \(changed)")
    _ = try await app.send { try await $0.postV1EntitlementsCheck(body: .json(.init(feature: "ai_suggestions"))).ok.body.json }

    // Restoring purchases on a new device, and Apple's renewal notification.
    let restored = try await app.send { try await $0.postV1PurchasesAppleRestore(body: .json(.init(signedTransactions: [signed]))).ok.body.json }
    try expect(restored.tier == "pro", "restored: \(restored)")
    let renewal = try await fixture("appstore/notification", ["type": "DID_RENEW", "payload": bought["payload"]!])
    _ = try await newApp().send { try await $0.postV1WebhooksAppStore(body: .json(.init(signedPayload: renewal["signed"] as! String))).ok.body.json }
}
