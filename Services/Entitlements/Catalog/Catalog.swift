import Foundation
import ServiceKit

/// The tiers, features and limits the service sells: data, not code. Shipped as
/// `Resources/catalog.json`; `ENTITLEMENTS_CATALOG` names a file to use instead. Checked whole at
/// start, so a typo stops the service rather than silently giving a feature away.
struct Catalog: Sendable, Decodable {
    struct Tier: Sendable, Decodable, Equatable {
        var id: String
        var name: String
        var priceText: String
        /// Which tier wins when a user holds several (higher wins).
        var rank: Int
        var features: [String]
        /// Limit name → its cap; `null` is unlimited.
        var limits: [String: Int?]
        var products: [String]

        enum CodingKeys: String, CodingKey {
            case id, name, priceText = "price_text", rank, features, limits, products
        }
    }

    struct Feature: Sendable, Decodable, Equatable {
        var name: String
        /// The tier an upgrade message points to.
        var upgradeTier: String
        enum CodingKeys: String, CodingKey { case name, upgradeTier = "upgrade_tier" }
    }

    struct Limit: Sendable, Decodable, Equatable {
        var name: String
        var upgradeTier: String
        /// The service that counts this limit itself (nutrition counts `meal_analyses_per_day` per
        /// local day, as each analysis runs); nil when it is counted here (`/v1/usage`).
        var countedBy: String?
        enum CodingKeys: String, CodingKey { case name, upgradeTier = "upgrade_tier", countedBy = "counted_by" }
    }

    var tiers: [Tier]
    var features: [String: Feature]
    var limits: [String: Limit]

    static let freeTier = "free"

    struct Invalid: Error, CustomStringConvertible {
        var problems: [String]
        var description: String { "the entitlements catalogue is invalid: " + problems.joined(separator: "; ") }
    }

    static func load(path: String?) throws -> Catalog {
        let data: Data
        if let path, !path.isEmpty {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } else {
            guard let url = Bundle.module.url(forResource: "catalog", withExtension: "json", subdirectory: "Resources") else {
                throw Invalid(problems: ["Resources/catalog.json is missing from the bundle"])
            }
            data = try Data(contentsOf: url)
        }
        let catalog: Catalog
        do {
            catalog = try JSONDecoder().decode(Catalog.self, from: data)
        } catch {
            throw Invalid(problems: ["not the catalogue's JSON shape: \(error)"])
        }
        try catalog.validate()
        return catalog
    }

    func validate() throws {
        var problems: [String] = []
        let ids = tiers.map(\.id)
        if Set(ids).count != ids.count { problems.append("tier ids repeat") }
        if !ids.contains(Self.freeTier) { problems.append("there is no free tier") }
        if Set(tiers.map(\.rank)).count != tiers.count { problems.append("two tiers share a rank") }
        var products: Set<String> = []
        for tier in tiers {
            for feature in tier.features where features[feature] == nil { problems.append("tier \(tier.id) names unknown feature \(feature)") }
            for limit in tier.limits.keys where limits[limit] == nil { problems.append("tier \(tier.id) names unknown limit \(limit)") }
            for (limit, cap) in tier.limits { if let cap, cap < 0 { problems.append("tier \(tier.id) has a negative \(limit) limit") } }
            for product in tier.products where !products.insert(product).inserted { problems.append("product \(product) is in two tiers") }
            if tier.id == Self.freeTier, !tier.products.isEmpty { problems.append("the free tier sells no products") }
        }
        for (id, feature) in features where !ids.contains(feature.upgradeTier) { problems.append("feature \(id) points to unknown tier \(feature.upgradeTier)") }
        for (id, limit) in limits where !ids.contains(limit.upgradeTier) { problems.append("limit \(id) points to unknown tier \(limit.upgradeTier)") }
        if !problems.isEmpty { throw Invalid(problems: problems) }
    }

    func tier(_ id: String) -> Tier? { tiers.first { $0.id == id } }
    var free: Tier { tier(Self.freeTier)! }
    func tier(forProduct product: String) -> Tier? { tiers.first { $0.products.contains(product) } }

    /// The cheapest tier (lowest rank) that has `feature`.
    func lowestTier(with feature: String) -> Tier? {
        tiers.filter { $0.features.contains(feature) }.min { $0.rank < $1.rank }
    }

    /// A tier's cap on `limit`: nil unlimited; a limit the tier does not name is unlimited too
    /// only if the catalogue says so, so an unnamed limit falls back to the free tier's cap.
    func cap(_ limit: String, in tier: Tier) -> Int? {
        if let cap = tier.limits[limit] { return cap }
        return free.limits[limit] ?? nil
    }

    /// The tier a user of `tier` would buy for more of `limit`: the limit's `upgrade_tier` when it
    /// gives more, else the cheapest tier ranked above `tier` that does; nil when none does.
    func upgrade(for limit: String, from tier: Tier) -> Tier? {
        func raises(_ candidate: Tier) -> Bool {
            guard candidate.rank > tier.rank else { return false }
            guard let current = cap(limit, in: tier) else { return false }
            guard let offered = cap(limit, in: candidate) else { return true }
            return offered > current
        }
        if let named = limits[limit].flatMap({ self.tier($0.upgradeTier) }), raises(named) { return named }
        return tiers.filter(raises).min { $0.rank < $1.rank }
    }

    /// `upgrade(for:from:)` of every limit that some tier raises, as events carry it.
    func limitUpgrades(from tier: Tier) -> [String: LimitUpgrade] {
        var upgrades: [String: LimitUpgrade] = [:]
        for limit in limits.keys {
            if let upgrade = upgrade(for: limit, from: tier) { upgrades[limit] = LimitUpgrade(tier: upgrade.id, name: upgrade.name) }
        }
        return upgrades
    }

    /// What a user of `tier` may do, as `entitlement.changed` and the catalogue's announcement carry it.
    func features(of tier: Tier) -> [String: Bool] { Dictionary(uniqueKeysWithValues: features.keys.map { ($0, tier.features.contains($0)) }) }
    func caps(of tier: Tier) -> [String: Int?] { Dictionary(uniqueKeysWithValues: limits.keys.map { ($0, cap($0, in: tier)) }) }
}
