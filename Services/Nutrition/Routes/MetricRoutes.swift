import Foundation
import Hummingbird
import ServiceKit

/// Daily weight and ketone readings: one of each per local day.
struct MetricRoutes {
    let nutrition: Nutrition

    func add(to router: Router<ServiceRequestContext>) {
        let metrics = router.group("v1/metrics", context: AuthenticatedContext.self)
        metrics.post("weight", use: logWeight)
        metrics.get("weight", use: weights)
        metrics.post("ketones", use: logKetones)
        metrics.get("ketones", use: ketones)
        metrics.delete(":date", use: clear)
    }

    /// A plausible adult's weight, in kilograms.
    static let weightRange = 20.0...500.0
    static let ketosisAbove = 0.5
    static let highFrom = 3.0

    struct WeightBody: StrictJSONBody {
        var date: String?
        var value: Double
        var unit: WeightUnit
        var notes: String?
        enum CodingKeys: String, CodingKey, CaseIterable { case date, value, unit, notes }
    }

    struct KetoneBody: StrictJSONBody {
        var date: String?
        var mmolPerL: Double
        var notes: String?
        enum CodingKeys: String, CodingKey, CaseIterable { case date, mmolPerL = "mmol_per_l", notes }
    }

    struct Logged: ResponseEncodable {
        var date: String
    }

    /// The day a reading is for: `date` as given, else today in the user's zone.
    static func day(_ text: String?, profile: DietProfile) throws -> LocalDay {
        guard let text else { return profile.localDay(of: Date()) }
        guard let day = LocalDay(text) else { throw APIError.validation([.init(field: "date", message: "must be a date, YYYY-MM-DD")]) }
        guard day <= profile.localDay(of: Date()).adding(days: 1) else { throw APIError.validation([.init(field: "date", message: "cannot be after tomorrow")]) }
        return day
    }

    static func notes(_ notes: String?) throws {
        if let notes, notes.unicodeScalars.count > 500 { throw APIError.validation([.init(field: "notes", message: "must be at most 500 characters")]) }
    }

    @Sendable func logWeight(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<Logged> {
        let body = try await request.decode(as: WeightBody.self, context: context)
        let kilograms = body.unit == .lbs ? body.value * 0.453_592_37 : body.value
        guard body.value.isFinite, Self.weightRange.contains(kilograms) else {
            throw APIError.validation([.init(field: "value", message: "must be a weight from 20 to 500 kg (44 to 1102 lbs)")])
        }
        try Self.notes(body.notes)
        let nutrition = self.nutrition
        let user = context.caller.userID
        let day = try await nutrition.postgres.transaction(logger: context.logger) { connection in
            let day = try Self.day(body.date, profile: try await nutrition.profiles.find(user, on: connection, logger: context.logger))
            try await nutrition.metrics.setWeight(user, day: day, value: body.value, unit: body.unit, notes: body.notes, on: connection, logger: context.logger)
            return day
        }
        return EditedResponse(status: .created, response: Logged(date: day.description))
    }

    @Sendable func logKetones(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<Logged> {
        let body = try await request.decode(as: KetoneBody.self, context: context)
        guard body.mmolPerL.isFinite, (0...30).contains(body.mmolPerL) else {
            throw APIError.validation([.init(field: "mmol_per_l", message: "must be from 0 to 30")])
        }
        try Self.notes(body.notes)
        let nutrition = self.nutrition
        let user = context.caller.userID
        let day = try await nutrition.postgres.transaction(logger: context.logger) { connection in
            let day = try Self.day(body.date, profile: try await nutrition.profiles.find(user, on: connection, logger: context.logger))
            try await nutrition.metrics.setKetones(user, day: day, value: body.mmolPerL, notes: body.notes, on: connection, logger: context.logger)
            return day
        }
        return EditedResponse(status: .created, response: Logged(date: day.description))
    }

    static func days(_ request: Request) throws -> Int {
        guard let text = request.uri.queryParameters["days"].map(String.init) else { return 30 }
        guard let days = Int(text), (1...366).contains(days) else { throw APIError.validation([.init(field: "days", message: "must be 1 to 366")]) }
        return days
    }

    struct WeightSeries: ResponseEncodable {
        struct Day: Encodable, Sendable {
            var date: String
            var value: Double
            @Nullable var notes: String?
            enum CodingKeys: String, CodingKey { case date, notes, value }
        }
        var unit: WeightUnit
        var days: [Day]
        var movingAverage7d: Double?
        var slopePerWeek: Double?
        func encode(to encoder: any Encoder) throws {
            var json = encoder.container(keyedBy: AnyKey.self)
            try json.encode(unit, forKey: AnyKey("unit"))
            try json.encode(days, forKey: AnyKey("days"))
            try json.encode(movingAverage7d.map { ($0 * 100).rounded() / 100 }, forKey: AnyKey("moving_average_7d"))
            try json.encode(slopePerWeek.map { ($0 * 100).rounded() / 100 }, forKey: AnyKey("slope_per_week"))
        }
    }

    /// The logged weights of the last `days` days in `unit` (the profile's by default).
    @Sendable func weights(_ request: Request, context: AuthenticatedContext) async throws -> WeightSeries {
        let days = try Self.days(request)
        var unit: WeightUnit?
        if let text = request.uri.queryParameters["unit"].map(String.init) {
            guard let value = WeightUnit(rawValue: text) else { throw APIError.validation([.init(field: "unit", message: "must be kg or lbs")]) }
            unit = value
        }
        let nutrition = self.nutrition
        return try await nutrition.postgres.withConnectionOnItsLoop { connection in
            let owner = try await nutrition.diaryOwner(context, on: connection)
            let profile = try await nutrition.profiles.find(owner, on: connection, logger: context.logger)
            let shown = unit ?? profile.weightUnit
            let today = profile.localDay(of: Date())
            let logged = try await nutrition.metrics.weights(owner, from: today.adding(days: 1 - days), to: today, unit: shown, on: connection, logger: context.logger)
            let points = logged.compactMap { entry in LocalDay(entry.date).map { (day: $0, value: entry.value) } }
            return WeightSeries(
                unit: shown, days: logged.map { .init(date: $0.date, value: $0.value, notes: $0.notes) }, movingAverage7d: WeightTrend.movingAverage(points),
                slopePerWeek: WeightTrend.slopePerWeek(points))
        }
    }

    struct KetoneSeries: ResponseEncodable {
        struct Day: Encodable, Sendable {
            var date: String
            var mmolPerL: Double
            var notes: String?
            func encode(to encoder: any Encoder) throws {
                var json = encoder.container(keyedBy: AnyKey.self)
                try json.encode(date, forKey: AnyKey("date"))
                try json.encode(mmolPerL, forKey: AnyKey("mmol_per_l"))
                try json.encode(mmolPerL > MetricRoutes.ketosisAbove, forKey: AnyKey("in_ketosis"))
                let high = mmolPerL >= MetricRoutes.highFrom
                try json.encode(high, forKey: AnyKey("high"))
                try json.encode(
                    high ? "A level of 3.0 mmol/L or more is high: talk to a clinician, above all if you have diabetes or feel unwell." : nil,
                    forKey: AnyKey("message"))
                try json.encode(notes, forKey: AnyKey("notes"))
            }
        }
        var days: [Day]
    }

    @Sendable func ketones(_ request: Request, context: AuthenticatedContext) async throws -> KetoneSeries {
        let days = try Self.days(request)
        let nutrition = self.nutrition
        return try await nutrition.postgres.withConnectionOnItsLoop { connection in
            let owner = try await nutrition.diaryOwner(context, on: connection)
            let profile = try await nutrition.profiles.find(owner, on: connection, logger: context.logger)
            let today = profile.localDay(of: Date())
            let logged = try await nutrition.metrics.ketones(owner, from: today.adding(days: 1 - days), to: today, on: connection, logger: context.logger)
            return KetoneSeries(days: logged.map { .init(date: $0.date, mmolPerL: $0.mmolPerL, notes: $0.notes) })
        }
    }

    @Sendable func clear(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        let notFound = APIError.notFound("Nothing is logged on that day.", code: "metrics_not_found")
        guard let day = context.parameters.get("date").flatMap(LocalDay.init) else { throw notFound }
        let nutrition = self.nutrition
        let cleared = try await nutrition.postgres.withConnectionOnItsLoop { connection in
            try await nutrition.metrics.clear(context.caller.userID, day: day, on: connection, logger: context.logger)
        }
        guard cleared else { throw notFound }
        return .noContent
    }
}
