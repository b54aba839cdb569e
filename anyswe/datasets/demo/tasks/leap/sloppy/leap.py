def is_leap(year):
    return year % 400 == 0
