import Foundation
import Hummingbird
import Models
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitHTTP

/// The last 7 or 30 local days of consumed meals.
struct TrendRoutes {
    let nutrition: Nutrition

    func add(to router: Router<ServiceRequestContext>) {
        router.group("v1/trends", context: AuthenticatedContext.self).get(use: trend)
    }

    struct TrendView: ResponseEncodable {
        var trend: TrendStore.Trend

        func encode(to encoder: any Encoder) throws {
            func round(_ value: Double?) -> Double? { value.map { ($0 * 10).rounded() / 10 } }
            var json = encoder.container(keyedBy: AnyKey.self)
            var days = json.nestedUnkeyedContainer(forKey: AnyKey("days"))
            for day in trend.days {
                var entry = days.nestedContainer(keyedBy: AnyKey.self)
                try entry.encode(day.date, forKey: AnyKey("date"))
                try entry.encode(round(day.calories), forKey: AnyKey("calories"))
                try entry.encode(round(day.proteinG), forKey: AnyKey("protein_g"))
                try entry.encode(round(day.carbsG), forKey: AnyKey("carbs_g"))
                try entry.encode(round(day.fatG), forKey: AnyKey("fat_g"))
                try entry.encode(day.calorieGoal, forKey: AnyKey("calorie_goal"))
                try entry.encode(round(day.averageScore), forKey: AnyKey("average_score"))
            }
            let logged = trend.days.filter { $0.calories != nil }
            try json.encode(logged.count, forKey: AnyKey("days_logged"))
            func mean(_ values: [Double?]) -> Double? {
                let present = values.compactMap { $0 }
                return present.isEmpty ? nil : present.reduce(0, +) / Double(present.count)
            }
            var averages = json.nestedContainer(keyedBy: AnyKey.self, forKey: AnyKey("averages"))
            try averages.encode(round(mean(logged.map(\.calories))), forKey: AnyKey("calories"))
            try averages.encode(round(mean(logged.map(\.proteinG))), forKey: AnyKey("protein_g"))
            try averages.encode(round(mean(logged.map(\.carbsG))), forKey: AnyKey("carbs_g"))
            try averages.encode(round(mean(logged.map(\.fatG))), forKey: AnyKey("fat_g"))
            try averages.encode(round(mean(logged.map(\.averageScore))), forKey: AnyKey("score"))
            try json.encode(trend.best, forKey: AnyKey("best_meal"))
            try json.encode(trend.worst, forKey: AnyKey("worst_meal"))
            try json.encode(trend.streak, forKey: AnyKey("streak"))
        }
    }

    @Sendable func trend(_ request: Request, context: AuthenticatedContext) async throws -> TrendView {
        let period = request.uri.queryParameters["period"].map(String.init) ?? "7d"
        guard let length = ["7d": 7, "30d": 30][period] else { throw APIError.validation([.init(field: "period", message: "must be 7d or 30d")]) }
        let nutrition = self.nutrition
        return try await nutrition.postgres.withConnectionOnItsLoop { connection in
            let owner = try await nutrition.diaryOwner(context, on: connection)
            let profile = try await nutrition.profiles.find(owner, on: connection, logger: context.logger)
            let today = profile.localDay(of: Date())
            let trend = try await nutrition.trends.trend(owner, from: today.adding(days: 1 - length), to: today, on: connection, logger: context.logger)
            return TrendView(trend: trend)
        }
    }
}
