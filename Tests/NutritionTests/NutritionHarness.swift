import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Models
import NIOCore
@testable import Nutrition
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import Testing
import TestSupport

/// One running nutrition service for a test: its own database and Redis stream, access tokens from a
/// test issuer, and auth's, social's and invitations' events put on the stream as they would.
struct NutritionTestEnvironment: ServiceHarness {
    let serviceName = "nutrition"
    let client: any TestClientProtocol
    let issuer: TestIssuer
    let database: TestDatabase
    let config: ServiceConfig
    let redis: RedisClient

    /// Last year, in which the tests' meals are eaten: a meal must be within five years of now
    /// (`MealDraft.eatenAtProblem`), so a fixed year would fail the tests once it is five years old.
    static let year = Calendar(identifier: .gregorian).component(.year, from: Date()) - 1

    static func run(_ environment: [String: String] = [:], _ body: @Sendable (NutritionTestEnvironment) async throws -> Void) async throws {
        let settings = ["APP_NAME": "Test Tracker", "PUBLIC_API_URL": "https://api.test"].merging(environment) { $1 }
        try await runService("nutrition", environment: settings, migrations: NutritionService.definition.allMigrations, build: buildApplication) { service in
            // Its tests plan, log and count by the day.
            try await clearOfTheHoursEnd()
            try await body(NutritionTestEnvironment(client: service.client, issuer: service.issuer, database: service.database, config: service.config, redis: service.redis))
        }
    }

    struct User: BearerHolder {
        let id: UUID
        let token: String
        var path: String { id.uuidString.lowercased() }
    }

    /// An account as auth makes one; its profile (made from `user.registered`) awaited.
    func user() async throws -> User {
        let id = UUID()
        try await publish(UserRegistered(userID: id, email: "\(id)@example.com", displayName: nil, provider: "email"), userID: id)
        try await waitUntil(.seconds(15)) { try await count("SELECT count(*) FROM profiles WHERE user_id = '\(id)'") == 1 }
        return User(id: id, token: try await issuer.token(userID: id))
    }

    func publish<Payload: EventPayload>(_ payload: Payload, userID: UUID?, producer: String = "auth", occurredAt: Date = Date()) async throws {
        try await EventStream(redis: redis, name: config.events.stream).publish(payload, producer: producer, userID: userID, occurredAt: occurredAt)
    }

    /// Sets the diet profile; the response must be 200.
    @discardableResult
    func setProfile(_ user: User, diet: String = "balanced", zone: String = "UTC", goal: Int = 2000, unit: String = "kg", dayStartsAt: Int = 0, custom: [String: Double]? = nil)
        async throws -> APIReply
    {
        var body: [String: Any] = ["diet": diet, "daily_calorie_goal": goal, "weight_unit": unit, "time_zone": zone, "day_starts_at": dayStartsAt]
        if let custom { body["custom_macros"] = custom }
        let reply = try await call(.put, "/v1/nutrition/profile", as: user, json: body)
        try #require(reply.status == .ok, "profile: \(reply.text)")
        return reply
    }

    static func item(
        _ name: String = "Grilled salmon", grams: Double = 150, calories: Double = 280, protein: Double = 30, carbs: Double = 0, fat: Double = 18,
        fiber: Double? = nil, sugar: Double? = nil, saturated: Double? = nil, sodium: Double? = nil, tags: [String]? = ["fish"]
    ) -> [String: Any] {
        var item: [String: Any] = ["name": name, "grams": grams, "calories": calories, "protein_g": protein, "carbs_g": carbs, "fat_g": fat]
        if let fiber { item["fiber_g"] = fiber }
        if let sugar { item["sugar_g"] = sugar }
        if let saturated { item["saturated_fat_g"] = saturated }
        if let sodium { item["sodium_mg"] = sodium }
        if let tags { item["tags"] = tags }
        return item
    }

    /// Logs a meal; `201` required.
    func meal(_ user: User, name: String = "Dinner", at eatenAt: String = "\(Self.year)-06-01T19:30:00+02:00", items: [[String: Any]] = [item()], consume: Bool = false)
        async throws -> [String: Any]
    {
        let reply = try await call(.post, "/v1/meals", as: user, json: ["name": name, "eaten_at": eatenAt, "items": items])
        try #require(reply.status == .created, "meal: \(reply.text)")
        if consume {
            let id = try #require(reply.json["id"] as? String)
            try #require(try await call(.post, "/v1/meals/\(id)/consume", as: user).status == .ok)
        }
        return reply.json
    }

    /// A new share link's token for the user's meal `id`.
    func shareToken(of id: String, as user: User) async throws -> String {
        let reply = try await call(.post, "/v1/meals/\(id)/share", as: user)
        return try #require(reply.json["token"] as? String, "share: \(reply.text)")
    }
}
