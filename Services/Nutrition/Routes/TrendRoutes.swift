import Foundation
import Hummingbird
import ServiceKit

/// The last 7 or 30 local days of consumed meals.
struct TrendRoutes {
    let nutrition: Nutrition

    func add(to router: Router<ServiceRequestContext>) {
        router.group("v1/trends", context: AuthenticatedContext.self).get(use: trend)
    }

    struct TrendView: Encodable {
        var trend: TrendStore.Trend

        /// Keys in the order of their names, as the encoder writes them: an object whose keys come
        /// in another order is sorted when it closes, which for 30 days cost more than their values.
        func encode(to encoder: any Encoder) throws {
            var json = encoder.container(keyedBy: AnyKey.self)
            let logged = trend.days.filter { $0.calories != nil }
            func mean(_ values: [Double?]) -> Double? {
                let present = values.compactMap { $0 }
                return present.isEmpty ? nil : present.reduce(0, +) / Double(present.count)
            }
            var averages = json.nestedContainer(keyedBy: AnyKey.self, forKey: AnyKey("averages"))
            try Self.encode(mean(logged.map(\.calories)), forKey: "calories", in: &averages)
            try Self.encode(mean(logged.map(\.carbsG)), forKey: "carbs_g", in: &averages)
            try Self.encode(mean(logged.map(\.fatG)), forKey: "fat_g", in: &averages)
            try Self.encode(mean(logged.map(\.proteinG)), forKey: "protein_g", in: &averages)
            try Self.encode(mean(logged.map(\.averageScore)), forKey: "score", in: &averages)
            try json.encode(trend.best, forKey: AnyKey("best_meal"))
            var days = json.nestedUnkeyedContainer(forKey: AnyKey("days"))
            for day in trend.days {
                var entry = days.nestedContainer(keyedBy: AnyKey.self)
                try Self.encode(day.averageScore, forKey: "average_score", in: &entry)
                if let goal = day.calorieGoal { try entry.encode(goal, forKey: AnyKey("calorie_goal")) } else { try entry.encodeNil(forKey: AnyKey("calorie_goal")) }
                try Self.encode(day.calories, forKey: "calories", in: &entry)
                try Self.encode(day.carbsG, forKey: "carbs_g", in: &entry)
                try entry.encode(day.date, forKey: AnyKey("date"))
                try Self.encode(day.fatG, forKey: "fat_g", in: &entry)
                try Self.encode(day.proteinG, forKey: "protein_g", in: &entry)
            }
            try json.encode(logged.count, forKey: AnyKey("days_logged"))
            try json.encode(trend.streak, forKey: AnyKey("streak"))
            try json.encode(trend.worst, forKey: AnyKey("worst_meal"))
        }

        /// A figure to one decimal, or `null`: written directly rather than as an `Optional`, whose
        /// generic path was most of the response's cost.
        private static func encode(_ value: Double?, forKey key: String, in container: inout KeyedEncodingContainer<AnyKey>) throws {
            guard let value else { return try container.encodeNil(forKey: AnyKey(key)) }
            try container.encode((value * 10).rounded() / 10, forKey: AnyKey(key))
        }
    }

    /// Whose trend, over how many days, ending on which day.
    struct ResponseKey: Hashable, Sendable {
        var owner: UUID
        var length: Int
        var today: LocalDay
    }

    /// Computed once per diary version (see `Nutrition.trendResponses`).
    @Sendable func trend(_ request: Request, context: AuthenticatedContext) async throws -> EncodedJSON {
        let period = request.uri.queryParameters["period"].map(String.init) ?? "7d"
        guard let length = ["7d": 7, "30d": 30][period] else { throw APIError.validation([.init(field: "period", message: "must be 7d or 30d")]) }
        let nutrition = self.nutrition
        return try await nutrition.postgres.withConnectionOnItsLoop { connection in
            let owner = try await nutrition.diaryOwner(context, on: connection)
            let record = try await nutrition.profiles.record(owner, on: connection, logger: context.logger)
            let today = record.profile.localDay(of: Date())
            let key = ResponseKey(owner: owner, length: length, today: today)
            func compute() async throws -> EncodedJSON {
                let trend = try await nutrition.trends.trend(owner, from: today.adding(days: 1 - length), to: today, goals: record.goals, on: connection, logger: context.logger)
                return try EncodedJSON(TrendView(trend: trend))
            }
            // A diary without a version yet (no change to it seen) is computed on every read.
            guard let answers = nutrition.trendResponses else { return try await compute() }
            return try await answers.value(for: key, version: record.diaryVersion, orMake: compute)
        }
    }
}
