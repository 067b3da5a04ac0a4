import Foundation
import ServiceKit

/// The figures over logged weights: a 7-day moving average and the slope per week.
enum WeightTrend {
    /// The mean of the values logged in the 7 days ending on the last logged day (days without a
    /// value are left out, not counted as zero); nil without any.
    static func movingAverage(_ days: [(day: LocalDay, value: Double)]) -> Double? {
        guard let last = days.last?.day else { return nil }
        let window = days.filter { $0.day > last.adding(days: -7) }.map(\.value)
        return window.isEmpty ? nil : window.reduce(0, +) / Double(window.count)
    }

    /// The least-squares slope of value against day, times seven; nil with fewer than two days.
    static func slopePerWeek(_ days: [(day: LocalDay, value: Double)]) -> Double? {
        guard days.count >= 2, let first = days.first?.day else { return nil }
        let xs = days.map { Double(first.distance(to: $0.day)) }
        let ys = days.map(\.value)
        let meanX = xs.reduce(0, +) / Double(xs.count)
        let meanY = ys.reduce(0, +) / Double(ys.count)
        let sxx = xs.reduce(0) { $0 + ($1 - meanX) * ($1 - meanX) }
        guard sxx > 0 else { return nil }
        let sxy = zip(xs, ys).reduce(0) { $0 + ($1.0 - meanX) * ($1.1 - meanY) }
        return sxy / sxx * 7
    }
}
